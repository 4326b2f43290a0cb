"""GitOps review: what a pull request will do to each environment.

`git` reads environment files and their lock files at a revision (or the working
tree), `review` pairs them up (added, deleted, renamed, modified) and plans both
sides, `compare` turns two plans into `model.Change`s with a risk level, `derive` (run
by `revision` with each revision's own code) derives an environment's facts (plan,
user-data, stack settings, cluster objects, rack runs, programs) and `effects` turns
two revisions' facts into changes, so a code change is seen by its consequence; `render`
writes text, a pull-request comment (Markdown) or JSON. `commands` holds the
`skyrack diff` and `skyrack check` command-line entry points.
"""

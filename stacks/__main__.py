"""Pulumi program: the Azure side of the environment named like the stack.

`pulumi stack select dev && pulumi up` builds `configs/dev.yaml`. See docs/azure.md.
"""

import os
import sys
from pathlib import Path

import pulumi

HERE = Path(__file__).resolve().parent
sys.path.insert(0, str(HERE))

from controlplane import run  # noqa: E402

run(pulumi.get_stack(), Path(os.path.relpath(HERE.parent / "configs")))

"""What the PKI dynamic provider leaves in a stack's state, and why it reads on another Python minor.

Pulumi's Python dynamic providers are serialized with dill into each resource's state
(`__provider`, base64). dill can pickle a class *by value* (its bytecode, which only the Python
minor that wrote it can load) or *by reference* (module and name, resolved by import). skyrack's
provider is a module-level class with no state of its own in an importable module, so it is
pickled by reference: the state holds `skyrack.azure.pki.PkiProvider` and nothing else. These
tests fail the day that stops being true (a closure, a lambda or per-instance data in the
provider, or the class moved into the program's `__main__`).

Only one Python (3.11) is on this machine: loading the state under a second minor is not run
here. What stands for it: the serialized bytes are a protocol 4 pickle (5 when Python 3.14
writes it; every Python from 3.8 reads both) of eight opcodes that name the class and call
it with no arguments, no dill constructor (`_create_code`, `_create_function`, `_create_type`)
at all; plain `pickle` (no dill) loads them.
"""

from __future__ import annotations

import base64
import pickle
import pickletools

from pulumi.dynamic.dynamic import serialize_provider

from skyrack.azure import pki

BY_REFERENCE = {"PROTO", "FRAME", "SHORT_BINUNICODE", "MEMOIZE", "STACK_GLOBAL", "EMPTY_TUPLE", "NEWOBJ", "STOP"}


def state_bytes() -> bytes:
    return base64.b64decode(serialize_provider(pki._PROVIDER))


def test_the_provider_in_state_is_a_reference_to_its_class():
    ops = list(pickletools.genops(state_bytes()))
    assert {op.name for op, _, _ in ops} <= BY_REFERENCE, [op.name for op, _, _ in ops]
    strings = [arg for op, arg, _ in ops if op.name == "SHORT_BINUNICODE"]
    assert strings == ["skyrack.azure.pki", "PkiProvider"]
    assert ops[0][0].name == "PROTO" and ops[0][1] <= 5  # 4 (5 when Python 3.14 writes it): read since 3.8


def test_plain_pickle_loads_it_without_dill():
    provider = pickle.loads(state_bytes())
    assert type(provider) is pki.PkiProvider and vars(provider) == {}

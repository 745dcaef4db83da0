"""Capabilities are checked structurally. No agent class (nor config class) subclasses a
Protocol, so none can inherit a Protocol method's ``...`` stub (it would pass
``isinstance`` and return None); every capability an agent declares in ``CAPABILITIES``
holds for a built agent, and every capability whose method an agent class defines is
declared there, where a reader sees it. Sub-agents (WSRL's CQL and SAC, SAC-Lagrangian's
SAC) are walked too."""

import ast
import inspect
import textwrap
import typing
from functools import cache

import numpy as np
import pytest

from rlcore import capabilities, catalog
from rlcore.agent_state import Parts
from rlcore.capabilities import Agent, OnPolicy, Planned
from tests.conftest import registered_agent

ALGOS = sorted(catalog.ALGORITHMS)
# what an agent may declare beyond Agent (StateStatistics has no method: checked by isinstance)
OPTIONAL = [
    capabilities.OnPolicy,
    capabilities.CostCritic,
    capabilities.CostRecorder,
    capabilities.Phased,
    capabilities.PerEnvState,
    capabilities.EvalPolicy,
    capabilities.DatasetUser,
]


def _is_protocol(klass: type) -> bool:
    return bool(klass.__dict__.get("_is_protocol", False))


def _function(attr: object) -> object:
    """The plain function behind a class attribute (method, property, static/class
    method, a ``numpy_act``-wrapped act), or None."""
    if isinstance(attr, property):
        attr = attr.fget
    attr = getattr(attr, "__func__", attr)
    attr = inspect.unwrap(attr) if callable(attr) else attr
    return attr if inspect.isfunction(attr) else None


def _is_stub(function: object) -> bool:
    """A body of only a docstring, ``...`` or ``pass``: returns None whatever it is given."""
    try:
        source = textwrap.dedent(inspect.getsource(function))
    except (OSError, TypeError):
        return False
    node = ast.parse(source).body[0]
    assert isinstance(node, ast.FunctionDef | ast.AsyncFunctionDef)
    body = node.body
    if body and isinstance(body[0], ast.Expr) and isinstance(body[0].value, ast.Constant):
        body = body[1:] if isinstance(body[0].value.value, str) else body
    return all(
        isinstance(statement, ast.Pass)
        or (
            isinstance(statement, ast.Expr)
            and isinstance(statement.value, ast.Constant)
            and statement.value.value is Ellipsis
        )
        for statement in body
    )


def stub_problems(cls: type) -> list[str]:
    """What ``cls`` inherits from a Protocol or defines as a stub, one line each."""
    mro = [k for k in cls.__mro__ if k not in (object, typing.Generic, typing.Protocol)]
    problems = [
        f"{cls.__name__} subclasses the Protocol {k.__name__}" for k in mro if _is_protocol(k)
    ]
    for name in sorted({name for klass in mro for name in vars(klass)}):
        owner = next(klass for klass in mro if name in vars(klass))  # what cls.name resolves to
        function = _function(vars(owner)[name])
        if function is None or name.startswith("__"):
            continue
        if _is_protocol(owner):
            problems.append(f"{cls.__name__}.{name} is {owner.__name__}'s stub")
        elif _is_stub(function):
            problems.append(f"{cls.__name__}.{name} (in {owner.__name__}) is a stub")
    return problems


def declared(cls: type) -> tuple[type, ...]:
    return tuple(getattr(cls, "CAPABILITIES", ()))


built_agent = cache(registered_agent)


def agents_within(agent: object) -> list[object]:
    """``agent`` and every sub-agent among its parts (nested ``Parts`` included)."""
    found, parts = [agent], [agent.parts]
    while parts:
        for part in parts.pop().parts.values():
            if isinstance(part, Parts):
                parts.append(part)
            elif isinstance(part, Agent):
                found += agents_within(part)
    return found


@pytest.mark.parametrize("name", ALGOS)
def test_no_agent_class_inherits_a_protocol_stub(name):
    """The test that fails for an agent that subclasses a Protocol and forgets a method."""
    for agent in agents_within(built_agent(name)):
        problems = stub_problems(type(agent))
        assert not problems, "\n".join(problems)


@pytest.mark.parametrize("name", ALGOS)
def test_declared_capabilities_hold(name):
    for agent in agents_within(built_agent(name)):
        cls = type(agent)
        assert isinstance(agent, Agent), f"{cls.__name__} is not an Agent"
        for protocol in declared(cls):
            assert getattr(protocol, "_is_runtime_protocol", False), protocol
            assert isinstance(agent, protocol), f"{cls.__name__} lacks {protocol.__name__}"


def _methods(protocol: type) -> set[str]:
    return {name for name, attr in vars(protocol).items() if _function(attr) and name[0] != "_"}


@pytest.mark.parametrize("name", ALGOS)
def test_implemented_capabilities_are_declared(name):
    """A capability's method defined by an agent class (or a class it extends) means the
    capability is in its ``CAPABILITIES`` (so the reader sees it there)."""
    for agent in agents_within(built_agent(name)):
        cls = type(agent)
        own = {attr for klass in cls.__mro__[:-1] for attr in vars(klass)}
        for protocol in OPTIONAL:
            if _methods(protocol) & own:
                assert protocol in declared(cls), f"{cls.__name__} implements {protocol.__name__}"
    assert set(typing.get_type_hints(capabilities.StateStatistics)) == {"obs_normalizer"}


@pytest.mark.parametrize("name", ALGOS)
def test_configs_inherit_no_protocol_and_declare_what_they_implement(name):
    cls = catalog.get(name).config_class
    problems = stub_problems(cls)
    assert not problems, "\n".join(problems)
    config = cls()
    assert isinstance(config, Planned)
    for protocol in declared(cls):
        assert isinstance(config, protocol), f"{cls.__name__} lacks {protocol.__name__}"
    if "device_sizes" in {attr for klass in cls.__mro__[:-1] for attr in vars(klass)}:
        assert capabilities.DeviceSized in declared(cls)


def test_a_forgotten_method_is_caught():
    """An agent subclassing OnPolicy without ``value`` passes ``isinstance`` (the
    Protocol's stub answers) and its ``value`` returns None: the stub check names it."""

    class Forgetful(OnPolicy):
        def explore(self, obs):
            return obs, obs, obs

    assert isinstance(Forgetful(), OnPolicy) and Forgetful().value(np.zeros(3)) is None
    assert stub_problems(Forgetful) == [
        "Forgetful subclasses the Protocol OnPolicy",
        "Forgetful.value is OnPolicy's stub",
    ]

    class Copied:
        def value(self, obs):
            """V(obs)."""
            ...

    assert stub_problems(Copied) == ["Copied.value (in Copied) is a stub"]

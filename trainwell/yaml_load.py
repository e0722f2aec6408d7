"""Reading a config's YAML strictly and fast: duplicate keys, alias bombs and deep nesting
are refused with one line, before any value is built.

PyYAML's safe loader keeps the last of two equal keys (a typo silently wins), expands
nothing itself but hands on shared structures that every later copy multiplies (a 1 KB
"billion laughs" file is 10**9 values), and its pure-Python parser costs seconds per MB.
This loader parses with libyaml where PyYAML has it, looks at the node graph (duplicate
keys, the size the aliases expand to, the depth), then builds the values.

Example:
    >>> load_yaml("a: 1\\nb: [2, 3]\\n", "c.yaml")
    {'a': 1, 'b': [2, 3]}
    >>> load_yaml("a: 1\\na: 2\\n", "c.yaml")
    Traceback (most recent call last):
    ...
    trainwell.errors.UserError: config file c.yaml: duplicate key 'a' at line 2 (first at line 1)
"""

from __future__ import annotations

from pathlib import Path
from typing import Any

import yaml
from yaml.nodes import MappingNode, Node, ScalarNode, SequenceNode

from trainwell.errors import UserError

# libyaml's parser where PyYAML was built with it (the wheels are); same rules either way.
_BASE: type = getattr(yaml, "CSafeLoader", yaml.SafeLoader)

# Values that aliases may add beyond those written out: generous for anchors that share
# a block between sections, far below what makes a bomb.
MAX_ALIAS_EXPANSION = 100_000
# No config nests this deep; Python's recursion (OmegaConf's merge) gives out near 1000.
MAX_DEPTH = 100

_MERGE = "tag:yaml.org,2002:merge"


class _Loader(_BASE):
    pass


def load_yaml(text: str, where: str) -> Any:
    """Parse ``text`` (the file ``where``) as safe YAML, after the checks above."""
    loader = _Loader(text)
    try:
        node = loader.get_single_node()
        if node is None:
            return None
        _check(node, where)
        return loader.construct_document(node)
    finally:
        loader.dispose()


def read_yaml_file(path: Path) -> Any:
    """The YAML document in ``path``; every failure is one :class:`UserError` line."""
    try:
        text = path.read_text()
    except FileNotFoundError:
        raise UserError(f"config file {path} does not exist") from None
    except (OSError, UnicodeDecodeError) as exc:
        raise UserError(f"config file {path} cannot be read: {exc}") from None
    try:
        return load_yaml(text, str(path))
    except yaml.constructor.ConstructorError as exc:
        # safe YAML refuses !!python/... tags: they could construct arbitrary objects.
        raise UserError(
            f"config file {path} uses a tag that safe YAML refuses ({exc.problem}); write "
            "plain values"
        ) from None
    except yaml.YAMLError as exc:
        mark = getattr(exc, "problem_mark", None)
        where = f" at line {mark.line + 1}, column {mark.column + 1}" if mark else ""
        raise UserError(
            f"config file {path} is not valid YAML{where}: {yaml_problem(exc)}"
        ) from None


def yaml_problem(exc: yaml.YAMLError) -> str:
    """The gist of PyYAML's message, which spans several lines with a source excerpt."""
    problem = getattr(exc, "problem", None) or getattr(exc, "reason", None) or str(exc)
    return " ".join(str(problem).split())


def _check(root: Node, where: str) -> None:
    """Duplicate keys, alias expansion and depth, in one walk over the unique nodes."""
    expanded: dict[int, int] = {}  # id(node) -> values it stands for, aliases expanded
    depth_of: dict[int, int] = {id(root): 1}
    on_path: set[int] = set()
    stack: list[tuple[Node, bool]] = [(root, False)]
    while stack:
        node, done = stack.pop()
        key = id(node)
        if done:
            on_path.discard(key)
            expanded[key] = 1 + sum(expanded[id(c)] for c in _children(node))
            continue
        if key in expanded:
            continue
        depth = depth_of[key]
        if depth > MAX_DEPTH:
            raise UserError(
                f"config file {where}: nested more than {MAX_DEPTH} levels deep at line "
                f"{node.start_mark.line + 1}"
            )
        if isinstance(node, MappingNode):
            _refuse_duplicates(node, where)
        on_path.add(key)
        stack.append((node, True))
        for child in _children(node):
            if id(child) in on_path:
                raise UserError(
                    f"config file {where}: the alias at line {child.start_mark.line + 1} "
                    "refers to a block that holds it"
                )
            if id(child) not in expanded:
                depth_of[id(child)] = max(depth_of.get(id(child), 0), depth + 1)
                stack.append((child, False))
    extra = expanded[id(root)] - len(expanded)
    if extra > MAX_ALIAS_EXPANSION:
        raise UserError(
            f"config file {where}: its aliases (*name) expand to more than "
            f"{MAX_ALIAS_EXPANSION} values; write the values out or share fewer"
        )


def _children(node: Node) -> list[Node]:
    if isinstance(node, SequenceNode):
        return list(node.value)
    if isinstance(node, MappingNode):
        return [part for pair in node.value for part in pair]
    return []


def _refuse_duplicates(node: MappingNode, where: str) -> None:
    first: dict[tuple[str, str], int] = {}
    for key_node, _ in node.value:
        if not isinstance(key_node, ScalarNode) or key_node.tag == _MERGE:
            continue
        line = key_node.start_mark.line + 1
        name = (key_node.tag, key_node.value)
        if name in first:
            raise UserError(
                f"config file {where}: duplicate key {key_node.value!r} at line {line} "
                f"(first at line {first[name]})"
            )
        first[name] = line

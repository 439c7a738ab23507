"""CEL cost: cel-go's cost model, estimated once at compile time and charged during evaluation.

Upstream limits (dra.md §2.3, `resourceapi.CELSelectorExpressionMaxCost`): an expression whose
*estimated* worst-case cost exceeds 1,000,000 is refused by API validation with
"too complex, exceeds cost limit"; an evaluation whose *actual* cost passes 1,000,000 stops
with cel-go's "operation cancelled: actual cost limit exceeded".

The estimate walks the parse tree once with cel-go's unit costs (`checker/cost.go`, Kubernetes'
`library.CostEstimator`) and the worst-case sizes of DRA's inputs (`compile.go` declares them:
driver 63 chars, 32 domains of 32 attributes, values up to 64 chars or 64 list entries):

- identifier, field selection, index: 1; `&&`, `||`, `?:`, `has()`: 0 (plus their operands;
  a conditional counts its dearer branch);
- a call or operator: 1, or proportional to its operands' sizes where cel-go says so: string
  comparison, concatenation, `contains`, `startsWith`, traversals (`charAt`, `trim`, `split`,
  `lowerAscii`, ...) 0.1 per character; `matches`/`find` (0.1 per character) x (0.25 per
  pattern character); `in` a list and the lists library: 1 per element; `sets.*`: the product;
- list literal 10, map literal 30 (plus the elements);
- a comprehension: its range once, plus per element a fixed overhead (the accumulator steps
  cel-go's macro expansion adds: 3 for `all`/`exists`, 3 for `exists_one`, 12 for `map`,
  13 for `filter`) and the body's cost, plus once its accumulator's start and result (1 to 11);
  `cel.bind` (a comprehension over `[]`) costs its two parts plus 10.

Sizes flow through the tree (list literals, concatenations, `split`, `map`, bound variables),
so an expression that builds big values is seen to. Where we diverge from cel-go we err on the
dear side, so the estimate stays an upper bound: list concatenation costs 0.1 per element (cel-go
concatenates lazily and charges 1, but Python copies), and `replace`/`join`/`format` are charged
for the largest result they can build.

At run time we do not count per tree node (that would slow every selector): each comprehension
charges, per element, its overhead plus the static cost of its body (`flat` below: the body
once, nested comprehensions charging their own elements). That over-counts bodies with
short-circuits, so a selector stops no later than upstream's would.
"""

from __future__ import annotations

import math
from collections.abc import Iterable, Mapping
from dataclasses import dataclass, field
from typing import Final

import lark

from extender.cel import literals
from extender.cel.parsing import Branch, Tree, ident_name, leaf, subtree, unwrap

#: `resourceapi.CELSelectorExpressionMaxCost`: both the estimate limit and the runtime budget.
MAX_COST: Final = 1_000_000
#: API validation's text for an expression whose estimated cost is over the limit.
TOO_COMPLEX: Final = "too complex, exceeds cost limit"

STRING_FACTOR: Final = 0.1  # cel-go common.StringTraversalCostFactor
REGEX_FACTOR: Final = 0.25  # cel-go common.RegexStringLengthCostFactor
LIST_CREATE: Final = 10  # cel-go common.ListCreateBaseCost
MAP_CREATE: Final = 30  # cel-go common.MapCreateBaseCost
#: Per-element cost a comprehension adds around its body (cel-go's accumulator steps).
ITERATION_OVERHEAD: Final = {"all": 3, "exists": 3, "exists_one": 3, "existsOne": 3, "map": 12, "filter": 13}
#: Once per comprehension: its accumulator's initial value and its result expression.
_FOLD_FIXED: Final = {"all": 1, "exists": 1, "exists_one": 2, "existsOne": 2, "map": 11, "filter": 11}
#: `cel.bind` is a comprehension over an empty list literal: that list's creation.
_BIND_FIXED: Final = LIST_CREATE
_CAP: Final = 2**63  # sizes and costs saturate here instead of growing without bound


@dataclass(frozen=True, slots=True)
class Shape:
    """The worst-case size of a value: characters, list elements or map entries (1 for scalars)."""

    size: int = 1
    elem: Shape | None = None  # list elements or map values
    key: Shape | None = None  # map keys
    fields: Mapping[str, Shape] = field(default_factory=dict)
    sized: bool = False  # a string, bytes, list or map (a 1-character string is not a scalar)


SCALAR: Final = Shape()


def sized(size: int, elem: Shape | None = None, key: Shape | None = None) -> Shape:
    return Shape(size, elem, key, sized=True)


_ATTRIBUTE = sized(64, elem=sized(64))  # a string/version (64 chars) or a list attribute (64 values)
_DEVICE: Final = Shape(
    4,
    fields={
        "driver": sized(63),
        "allowMultipleAllocations": SCALAR,
        "attributes": sized(32, key=sized(63), elem=sized(32, key=sized(32), elem=_ATTRIBUTE)),
        "capacity": sized(32, key=sized(63), elem=sized(32, key=sized(32), elem=SCALAR)),
    },
)


def _sat(value: float) -> int:
    return min(math.ceil(value), _CAP)


def _scaled(size: int, factor: float) -> int:
    """cel-go's `size * factor`, rounded up, at least 1."""
    return max(1, _sat(size * factor))


def _join(a: Shape, b: Shape) -> Shape:
    """A shape that covers both (the two branches of a conditional, the elements of a list)."""
    if a is b:
        return a
    elem, key = _either(a.elem, b.elem), _either(a.key, b.key)
    return Shape(max(a.size, b.size), elem, key, {**b.fields, **a.fields}, a.sized or b.sized)


def _either(a: Shape | None, b: Shape | None) -> Shape | None:
    return a if b is None else b if a is None else _join(a, b)


@dataclass(slots=True)
class Cost:
    """The estimate of one subtree: `full` worst case, `flat` (comprehension bodies once), `shape`."""

    full: int
    flat: int
    shape: Shape = SCALAR

    def plus(self, other: Cost) -> Cost:
        return Cost(min(self.full + other.full, _CAP), min(self.flat + other.flat, _CAP), self.shape)


class Estimator:
    """Walks a parse tree; `iteration_costs` maps each comprehension node to its per-element charge."""

    def __init__(self) -> None:
        self.iteration_costs: dict[int, int] = {}

    def estimate(self, tree: Tree) -> int:
        """The worst-case cost of evaluating `tree` once."""
        return self.walk(tree, {"device": _DEVICE}).full

    def walk(self, branch: Branch, scope: dict[str, Shape]) -> Cost:
        tree = unwrap(branch)
        handler = getattr(self, f"_{tree.data}", None) if isinstance(tree, lark.Tree) else None
        if handler is None:
            return Cost(1, 1)
        result: Cost = handler(tree, scope)
        return result

    def _sum(self, trees: Iterable[Branch], scope: dict[str, Shape]) -> Cost:
        total = Cost(0, 0)
        for child in trees:
            total = total.plus(self.walk(child, scope))
        return total

    # -- operators --------------------------------------------------------------------------

    def _expr(self, tree: Tree, scope: dict[str, Shape]) -> Cost:
        cond, then, other = (self.walk(child, scope) for child in tree.children)
        return Cost(
            min(cond.full + max(then.full, other.full), _CAP),
            min(cond.flat + max(then.flat, other.flat), _CAP),
            _join(then.shape, other.shape),
        )

    def _logical(self, tree: Tree, scope: dict[str, Shape]) -> Cost:
        chain: list[Branch] = []
        kind = tree.data
        while tree.data == kind and len(tree.children) == 2:
            chain.append(tree.children[1])
            tree = subtree(tree.children[0])
        chain.append(tree)
        total = self._sum(chain, scope)
        return Cost(total.full, total.flat)

    _conditionalor = _conditionaland = _logical

    def _binary_chain(self, tree: Tree, scope: dict[str, Shape]) -> Cost:
        steps: list[tuple[str, Branch]] = []
        kind = tree.data
        while tree.data == kind and len(tree.children) == 2:
            op_branch, operand = tree.children
            op_node = subtree(op_branch)
            steps.append((op_node.data, operand))
            tree = subtree(op_node.children[0])
        total = self.walk(tree, scope)
        for op, right_tree in reversed(steps):
            right = self.walk(right_tree, scope)
            cost, shape = _operator(op, total.shape, right.shape)
            total = total.plus(right).plus(Cost(cost, cost))
            total.shape = shape
        return total

    _relation = _addition = _multiplication = _binary_chain

    def _unary(self, tree: Tree, scope: dict[str, Shape]) -> Cost:
        ops = 0
        while tree.data == "unary" and len(tree.children) == 2:
            ops += 1
            tree = subtree(tree.children[1])
        inner = self.walk(tree, scope)
        return inner.plus(Cost(ops, ops))

    # -- members ----------------------------------------------------------------------------

    def _select(self, tree: Tree, scope: dict[str, Shape]) -> Cost:
        target_tree, name = tree.children
        target = self.walk(target_tree, scope)
        shape = target.shape.fields.get(str(name)) or target.shape.elem or SCALAR
        result = target.plus(Cost(1, 1))
        result.shape = shape
        return result

    _member_dot = _member_dot_opt = _select

    def _index(self, tree: Tree, scope: dict[str, Shape]) -> Cost:
        target, key = (self.walk(child, scope) for child in tree.children)
        result = target.plus(key).plus(Cost(1, 1))
        result.shape = target.shape.elem or SCALAR
        return result

    _member_index = _member_index_opt = _index

    def _member_object(self, tree: Tree, scope: dict[str, Shape]) -> Cost:
        return Cost(1, 1)

    def _ident(self, tree: Tree, scope: dict[str, Shape]) -> Cost:
        return Cost(1, 1, scope.get(str(tree.children[0]), SCALAR))

    def _dot_ident(self, tree: Tree, scope: dict[str, Shape]) -> Cost:
        return Cost(1, 1, _DEVICE if str(tree.children[0]) == "device" else SCALAR)

    # -- calls and macros -------------------------------------------------------------------

    def _ident_arg(self, tree: Tree, scope: dict[str, Shape]) -> Cost:
        name = str(tree.children[0])
        args = list(subtree(tree.children[1]).children) if len(tree.children) == 2 else []
        if name == "has":
            selection = unwrap(args[0]) if len(args) == 1 else None
            if isinstance(selection, lark.Tree) and selection.data == "member_dot":
                target = self.walk(selection.children[0], scope)
                return Cost(target.full, target.flat)  # presence tests are free (PresenceTestHasCost false)
            return Cost(0, 0)
        return self._call(name, None, args, scope)

    _dot_ident_arg = _ident_arg

    def _member_dot_arg(self, tree: Tree, scope: dict[str, Shape]) -> Cost:
        receiver_tree, name_token = tree.children[:2]
        args = list(subtree(tree.children[2]).children) if len(tree.children) == 3 else []
        name = str(name_token)
        namespace = ident_name(receiver_tree)
        if namespace is not None and namespace not in scope:
            if f"{namespace}.{name}" == "cel.bind" and len(args) == 3:
                init = self.walk(args[1], scope)
                variable = ident_name(args[0]) or ""
                body = self.walk(args[2], {**scope, variable: init.shape})
                result = init.plus(body).plus(Cost(_BIND_FIXED, _BIND_FIXED))
                result.shape = body.shape
                return result
            if namespace in ("optional", "sets", "strings"):
                return self._call(f"{namespace}.{name}", None, args, scope)
        if name in ITERATION_OVERHEAD and len(args) in (2, 3):
            return self._comprehension(tree, name, receiver_tree, args, scope)
        return self._call(name, receiver_tree, args, scope)

    def _comprehension(
        self, tree: Tree, name: str, receiver_tree: Branch, args: list[Branch], scope: dict[str, Shape]
    ) -> Cost:
        source = self.walk(receiver_tree, scope)
        shape = source.shape
        two_vars = name != "map" and len(args) == 3
        names = [ident_name(arg) or "" for arg in args[: 2 if two_vars else 1]]
        is_map = shape.key is not None
        element = (shape.key if is_map else shape.elem) or SCALAR
        if two_vars:
            first = (shape.key or SCALAR) if is_map else SCALAR
            inner = {**scope, names[0]: first, names[1]: (shape.elem or SCALAR)}
        else:
            inner = {**scope, names[0]: element}
        bodies = [self.walk(arg, inner) for arg in args[len(names) :]]
        body_full = sum(b.full for b in bodies)
        per_element = min(ITERATION_OVERHEAD[name] + sum(b.flat for b in bodies), _CAP)
        self.iteration_costs[id(tree)] = per_element
        full = min(
            source.full + _FOLD_FIXED[name] + shape.size * (ITERATION_OVERHEAD[name] + body_full), _CAP
        )
        if name == "map":
            result = sized(shape.size, elem=bodies[-1].shape)
        elif name == "filter":
            result = sized(shape.size, elem=element)
        else:
            result = SCALAR
        return Cost(full, source.flat, result)

    def _call(
        self, name: str, receiver_tree: Branch | None, args: list[Branch], scope: dict[str, Shape]
    ) -> Cost:
        operands = [self.walk(arg, scope) for arg in ([receiver_tree] if receiver_tree is not None else [])]
        operands += [self.walk(arg, scope) for arg in args]
        total = Cost(0, 0)
        for operand in operands:
            total = total.plus(operand)
        cost, shape = _function(name, [operand.shape for operand in operands])
        result = total.plus(Cost(cost, cost))
        result.shape = shape
        return result

    # -- literals ---------------------------------------------------------------------------

    def _list_lit(self, tree: Tree, scope: dict[str, Shape]) -> Cost:
        elements = [self.walk(_element(element), scope) for element in tree.children]
        total = Cost(LIST_CREATE, LIST_CREATE)
        elem: Shape | None = None
        for element in elements:
            total = total.plus(element)
            elem = element.shape if elem is None else _join(elem, element.shape)
        total.shape = sized(len(elements), elem=elem)
        return total

    def _map_lit(self, tree: Tree, scope: dict[str, Shape]) -> Cost:
        total = Cost(MAP_CREATE, MAP_CREATE)
        key: Shape | None = None
        value: Shape | None = None
        for entry in tree.children:
            key_tree, value_tree = subtree(entry).children
            k, v = self.walk(_element(key_tree), scope), self.walk(value_tree, scope)
            total = total.plus(k).plus(v)
            key = k.shape if key is None else _join(key, k.shape)
            value = v.shape if value is None else _join(value, v.shape)
        total.shape = sized(len(tree.children), elem=value, key=key or SCALAR)
        return total

    def _literal(self, tree: Tree, scope: dict[str, Shape]) -> Cost:
        try:
            value = literals.literal_value(leaf(tree.children[0]))
        except literals.InvalidLiteral:
            return Cost(0, 0)
        return Cost(0, 0, sized(len(value)) if isinstance(value, str | bytes) else SCALAR)


def _element(tree: Branch) -> Branch:
    """A list element or map key, without its optional marker (`?x`)."""
    inner = tree.children[0] if isinstance(tree, lark.Tree) and tree.data == "list_elem" else tree
    if isinstance(inner, lark.Tree) and inner.data == "opt_expr":
        return inner.children[0]
    return inner


def _operator(op: str, left: Shape, right: Shape) -> tuple[int, Shape]:
    """Cost and result shape of a binary operator, as cel-go's estimator prices it."""
    if op == "relation_in":
        return (right.size if right.key is None else 1), SCALAR
    if op.startswith("relation_"):
        return _scaled(min(left.size, right.size), STRING_FACTOR), SCALAR
    if op == "addition_add" and (left.sized or right.sized):
        size = min(left.size + right.size, _CAP)
        elem = (
            left.elem
            if right.elem is None
            else right.elem
            if left.elem is None
            else _join(left.elem, right.elem)
        )
        return _scaled(size, STRING_FACTOR), sized(size, elem=elem)
    return 1, SCALAR


def _function(name: str, shapes: list[Shape]) -> tuple[int, Shape]:
    """Cost and result shape of a library call; `shapes` has the receiver (if any) first."""
    first = shapes[0] if shapes else SCALAR
    second = shapes[1] if len(shapes) > 1 else SCALAR
    traverse = _scaled(first.size, STRING_FACTOR)
    if name in ("matches", "find", "findAll"):
        cost = _sat(_scaled(first.size + 1, STRING_FACTOR) * _scaled(second.size, REGEX_FACTOR))
        if name == "findAll":
            return cost, sized(first.size, elem=sized(first.size))
        return cost, sized(first.size) if name == "find" else SCALAR
    if name in ("contains", "indexOf", "lastIndexOf") and first.elem is None:
        return _sat(traverse * _scaled(second.size, STRING_FACTOR)), SCALAR
    if name in ("startsWith", "endsWith"):
        return _scaled(second.size, STRING_FACTOR), SCALAR
    if name in ("charAt", "lowerAscii", "upperAscii", "trim", "substring", "quantity", "isQuantity"):
        return traverse, sized(first.size)
    if name in ("semver", "isSemver", "strings.quote"):
        return traverse, sized(min(2 * first.size + 2, _CAP))
    if name == "split":
        return traverse, sized(min(first.size + 1, _CAP), elem=sized(first.size))
    if name == "replace":
        third = shapes[2] if len(shapes) > 2 else SCALAR
        size = min(first.size + (first.size + 1) * third.size, _CAP)
        return _scaled(first.size + size, STRING_FACTOR), sized(size)
    if name == "join":
        elem = first.elem or SCALAR
        size = min(first.size * elem.size + first.size * second.size, _CAP)
        return _scaled(size, STRING_FACTOR), sized(size)
    if name == "format":
        elem = second.elem or SCALAR
        size = min(first.size + second.size * max(elem.size, 32), _CAP)
        return _scaled(size, STRING_FACTOR), sized(size)
    if name in ("isSorted", "sum", "min", "max", "indexOf", "lastIndexOf", "includes"):
        elem = first.elem or SCALAR
        return _sat(max(first.size, 1) * _scaled(elem.size, STRING_FACTOR)), elem
    if name.startswith("sets."):
        elem = first.elem or SCALAR
        return _sat(max(first.size, 1) * max(second.size, 1) * _scaled(elem.size, STRING_FACTOR)), SCALAR
    if name in ("string", "bytes"):
        return traverse, sized(max(first.size, 32))
    if name in ("dyn", "optional.of", "optional.ofNonZeroValue", "value", "orValue", "or"):
        return 1, (first if name != "orValue" and name != "or" else _join(first, second))
    return 1, SCALAR

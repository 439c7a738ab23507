"""Turn a parse tree into a program: nested Python closures over a per-evaluation slot list.

Why not cel-python's own `Evaluator`/`Transpiler`: measured on a typical DRA selector, its
interpreter takes ~370 us per evaluation and its transpiler ~55 us, because each evaluation
clones an `Activation` and resolves names through nested `NameContainer`s; the transpiler also
keeps the activation in module globals (unsafe across threads). Neither offers a hook for the
optional syntax or `cel.bind`. So we keep cel-python's grammar (see `parsing.py`) and literal
decoding, and compile its tree ourselves, once per expression text.

Compilation is also the type-free part of cel-go's checking: every identifier must be `device`,
a type name or a variable bound by an enclosing macro; every function must exist with that
argument count; `device.<field>` must be a field of the DRA device type. Problems are collected
as located `Issue`s (parser-level ones first, like cel-go, which only checks what parsed).

A program is called with `env`, a list: slot 0 holds `device`, slot 1 the cost budget,
and each macro variable (`all`, `exists`, `exists_one`, `map`, `filter`, their two-variable forms,
`cel.bind`) gets its own slot, assigned at compile time; so evaluation builds no dictionaries and
no scopes, and one compiled program serves any number of threads. Each comprehension element
spends its share of the per-evaluation cost budget (`costs.py` says how much, `COST_BUDGET`).
"""

from __future__ import annotations

import operator
from collections.abc import Callable, Sequence
from typing import Any, Final

import lark

from extender.cel import comprehensions, costs, libraries, literals, lookups, programs, values
from extender.cel.comprehensions import BUDGET_SLOT
from extender.cel.parsing import Branch, Issue, Tree, ident_name, leaf, position, subtree, unwrap

Program = Callable[[list[Any]], Any]

DEVICE_SLOT: Final = 0
#: How deeply operations may nest (cel-go's parser stops at a comparable depth); keeps both
#: compilation and evaluation far from Python's recursion limit.
MAX_NESTING: Final = 100
COST_BUDGET: Final = costs.MAX_COST
DEVICE_FIELDS: Final = frozenset({"driver", "attributes", "capacity", "allowMultipleAllocations"})
RESERVED: Final = frozenset(
    {"as", "break", "const", "continue", "else", "for", "function", "if", "import", "in", "let", "loop"}
    | {"package", "namespace", "return", "var", "void", "while"}
)
_MACROS: Final = frozenset({"all", "exists", "exists_one", "existsOne", "filter", "map"})
_BINARY: Final[dict[str, Callable[[Any, Any], Any]]] = {
    "relation_lt": values.less,
    "relation_le": values.less_equal,
    "relation_gt": values.greater,
    "relation_ge": values.greater_equal,
    "relation_eq": values.equal,
    "relation_ne": lambda a, b: not values.equal(a, b),
    "relation_in": lambda a, b: lookups.contains(b, a),
    "addition_add": values.add,
    "addition_sub": values.subtract,
    "multiplication_mul": values.multiply,
    "multiplication_div": values.divide,
    "multiplication_mod": values.modulo,
}


class _TooDeep(Exception):
    def __init__(self, location: tuple[int, int]) -> None:
        super().__init__("max recursion depth exceeded")
        self.location = location


class CompileIssues(Exception):
    """The tree does not compile; `issues` are located problems in cel-go's wording."""

    def __init__(self, issues: list[Issue]) -> None:
        super().__init__(issues[0].message)
        self.issues = issues


def compile_tree(text: str, tree: Tree) -> tuple[Program, int, int]:
    """Compile a parse tree of `text`.

    Returns the program, the number of slots it needs and its estimated worst-case cost
    (`costs.py`); the estimate also sets what each comprehension charges per element.

    Raises:
        CompileIssues: undeclared references, bad macro arguments, unknown functions, ...
    """
    compiler = _Compiler(text)
    try:
        program = compiler.node(tree, {"device": DEVICE_SLOT})
    except _TooDeep as exc:
        raise CompileIssues([Issue(*exc.location, str(exc))]) from None
    issues = compiler.parse_issues or compiler.check_issues
    if issues:
        raise CompileIssues(issues)
    # Estimated after compiling, which has bounded the nesting the estimator recurses through.
    estimator = costs.Estimator()
    cost = estimator.estimate(tree)
    for node_id, cell in compiler.iteration_costs.items():
        cell[0] = estimator.iteration_costs.get(node_id, cell[0])
    return program, compiler.slots, cost


class _Compiler:
    def __init__(self, text: str) -> None:
        self.text = text
        self.parse_issues: list[Issue] = []
        self.check_issues: list[Issue] = []
        self.slots = BUDGET_SLOT + 1
        self.depth = 0
        # Per-element cost cells of the comprehensions, by parse node; `compile_tree` fills them.
        self.iteration_costs: dict[int, list[int]] = {}

    # -- locations and issues ---------------------------------------------------------------

    def _at(self, where: Branch) -> tuple[int, int]:
        if isinstance(where, lark.Token):
            return where.line or 1, where.column or 1
        meta = getattr(where, "meta", None)
        return (getattr(meta, "line", 1), getattr(meta, "column", 1)) if meta is not None else (1, 1)

    def _next_char(self, token: lark.Token, char: str) -> tuple[int, int]:
        """Location of the first `char` after `token` (the "(" of a call)."""
        offset = self.text.find(char, token.end_pos or 0)
        return position(self.text, offset) if offset >= 0 else self._at(token)

    def _prev_char(self, token: lark.Token) -> tuple[int, int]:
        """Location of the "." before a field name (cel-go locates selections there)."""
        offset = (token.start_pos or 0) - 1
        while offset > 0 and self.text[offset] in " \t\r\n?":
            offset -= 1
        return position(self.text, max(offset, 0))

    def _issue(self, location: tuple[int, int], message: str, *, parse: bool = False) -> Program:
        (self.parse_issues if parse else self.check_issues).append(Issue(*location, message))
        return programs.failing(message)

    def _undeclared(self, location: tuple[int, int], name: str) -> Program:
        return self._issue(location, f"undeclared reference to '{name}' (in container '')")

    def _new_slot(self) -> int:
        self.slots += 1
        return self.slots - 1

    # -- dispatch ---------------------------------------------------------------------------

    def node(self, branch: Branch, scope: dict[str, int]) -> Program:
        tree = subtree(unwrap(branch))
        handler = getattr(self, f"_{tree.data}", None)
        if handler is None:
            return self._issue(self._at(tree), f"unsupported construct: {tree.data}", parse=True)
        self.depth += 1
        if self.depth > MAX_NESTING:
            raise _TooDeep(self._at(tree))
        try:
            program: Program = handler(tree, scope)
        finally:
            self.depth -= 1
        return program

    def _expr(self, tree: Tree, scope: dict[str, int]) -> Program:
        cond, then, other = (self.node(child, scope) for child in tree.children)
        return programs.conditional(cond, then, other)

    def _conditionalor(self, tree: Tree, scope: dict[str, int]) -> Program:
        return self._logical(tree, scope, stop=True, name="_||_")

    def _conditionaland(self, tree: Tree, scope: dict[str, int]) -> Program:
        return self._logical(tree, scope, stop=False, name="_&&_")

    def _logical(self, tree: Tree, scope: dict[str, int], *, stop: bool, name: str) -> Program:
        """`a || b || c` as one n-ary node: commutative, an error loses to a deciding operand."""
        chain: list[Branch] = []
        kind = tree.data
        while tree.data == kind and len(tree.children) == 2:
            chain.append(tree.children[1])
            tree = subtree(tree.children[0])
        chain.append(tree)
        operands = [self.node(child, scope) for child in reversed(chain)]
        return programs.logical(operands, stop=stop, name=name)

    def _binary_chain(self, tree: Tree, scope: dict[str, int]) -> Program:
        """Left-associative operator chains (`a + b - c`), folded in a loop, not by recursion."""
        steps: list[tuple[str, Branch]] = []
        kind = tree.data
        while tree.data == kind and len(tree.children) == 2:
            op_branch, right = tree.children
            op_node = subtree(op_branch)
            steps.append((op_node.data, right))
            tree = subtree(op_node.children[0])
        first = self.node(tree, scope)
        rest = [(_BINARY[op], self.node(right, scope)) for op, right in reversed(steps)]
        return programs.fold(first, rest)

    _relation = _addition = _multiplication = _binary_chain

    def _unary(self, tree: Tree, scope: dict[str, int]) -> Program:
        """`!x`, `-x`; like cel-go, a run of the same operator cancels out in pairs (`!!x` is `x`)."""
        ops: list[Callable[[Any], Any]] = []
        while tree.data == "unary" and len(tree.children) == 2:
            op = values.logical_not if subtree(tree.children[0]).data == "unary_not" else values.negate
            if ops and ops[-1] is op:
                ops.pop()
            else:
                ops.append(op)
            tree = subtree(tree.children[1])
        program = self.node(tree, scope)
        for op in reversed(ops):
            program = programs.unary(program, op)
        return program

    # -- members ----------------------------------------------------------------------------

    def _check_device_field(self, target: Branch, field: lark.Token, scope: dict[str, int]) -> None:
        is_device = ident_name(target) == "device" and scope.get("device") == DEVICE_SLOT
        if is_device and field not in DEVICE_FIELDS:
            self._issue(self._prev_char(field), f"undefined field '{field}'")

    def _member_dot(self, tree: Tree, scope: dict[str, int]) -> Program:
        target_tree, field = tree.children
        self._check_device_field(target_tree, leaf(field), scope)
        return programs.select(self.node(target_tree, scope), str(field))

    def _member_dot_opt(self, tree: Tree, scope: dict[str, int]) -> Program:
        target_tree, field = tree.children
        return programs.optional_select(self.node(target_tree, scope), str(field))

    def _member_index(self, tree: Tree, scope: dict[str, int]) -> Program:
        target, key = (self.node(child, scope) for child in tree.children)
        return programs.index(target, key)

    def _member_index_opt(self, tree: Tree, scope: dict[str, int]) -> Program:
        target, key = (self.node(child, scope) for child in tree.children)
        return programs.optional_select(target, key)

    def _member_object(self, tree: Tree, scope: dict[str, int]) -> Program:
        message = "unsupported construct: message creation (Type{field: value}) has no meaning in DRA CEL"
        return self._issue(self._at(tree), message, parse=True)

    def _member_dot_arg(self, tree: Tree, scope: dict[str, int]) -> Program:
        receiver_tree, name_token = tree.children[:2]
        args = list(subtree(tree.children[2]).children) if len(tree.children) == 3 else []
        name, call_at = str(name_token), self._next_char(leaf(name_token), "(")
        namespace = ident_name(receiver_tree)
        if namespace is not None and namespace not in scope and namespace in libraries.NAMESPACES:
            qualified = f"{namespace}.{name}"
            if qualified == "cel.bind":
                return self._bind(args, scope, call_at)
            if qualified in libraries.NAMESPACED_FUNCTIONS:
                return self._call(qualified, libraries.NAMESPACED_FUNCTIONS[qualified], args, scope, call_at)
        if (
            namespace is not None
            and namespace not in scope
            and namespace in libraries.NOT_IMPLEMENTED_NAMESPACES
        ):
            return self._not_implemented(
                call_at, f"{namespace}.{name}", libraries.NOT_IMPLEMENTED_NAMESPACES[namespace]
            )
        if name in _MACROS:
            return self._macro(tree, name, receiver_tree, args, scope, call_at)
        receiver = self.node(receiver_tree, scope)
        if name in libraries.NOT_IMPLEMENTED:  # not the arguments: they may be macro variables
            return self._not_implemented(call_at, name, libraries.NOT_IMPLEMENTED[name])
        if name in ("orValue", "or") and len(args) == 1:
            return programs.optional_or(name, receiver, self.node(args[0], scope))
        overload = libraries.MEMBER_FUNCTIONS.get(name)
        if overload is None:
            for arg in args:
                self.node(arg, scope)
            return self._unknown_function(call_at, name, len(args), receiver=True)
        return self._call(name, overload, args, scope, call_at, receiver=receiver)

    # -- identifiers, calls and macros ------------------------------------------------------

    def _ident(self, tree: Tree, scope: dict[str, int]) -> Program:
        token = tree.children[0]
        name = str(token)
        if name in scope:
            return operator.itemgetter(scope[name])
        if name in values.TYPE_IDENTIFIERS:
            return literals.const(values.TYPE_IDENTIFIERS[name])
        if name in RESERVED:
            return self._issue(self._at(token), f"reserved identifier: {name}", parse=True)
        return self._undeclared(self._at(token), name)

    def _dot_ident(self, tree: Tree, scope: dict[str, int]) -> Program:
        return self._ident(tree, {"device": DEVICE_SLOT})

    def _ident_arg(self, tree: Tree, scope: dict[str, int]) -> Program:
        name_token = tree.children[0]
        args = list(subtree(tree.children[1]).children) if len(tree.children) == 2 else []
        name, call_at = str(name_token), self._next_char(leaf(name_token), "(")
        if name == "has":
            return self._has(args, scope, call_at)
        if name in RESERVED:
            return self._issue(self._at(name_token), f"reserved identifier: {name}", parse=True)
        overload = libraries.GLOBAL_FUNCTIONS.get(name)
        if overload is None:
            for arg in args:
                self.node(arg, scope)
            return self._unknown_function(call_at, name, len(args), receiver=False)
        return self._call(name, overload, args, scope, call_at)

    def _unknown_function(
        self, call_at: tuple[int, int], name: str, count: int, *, receiver: bool
    ) -> Program:
        """A call that resolves to nothing in this style (global or receiver): cel-go's wording.

        A name declared only in the other style has no matching overload (cel-go keeps one
        function table for both); a name upstream declares but we do not implement says so.
        """
        if name in libraries.NOT_IMPLEMENTED:
            return self._not_implemented(call_at, name, libraries.NOT_IMPLEMENTED[name])
        other = libraries.GLOBAL_FUNCTIONS if receiver else libraries.MEMBER_FUNCTIONS
        if name in other:
            style = "receiver call" if receiver else "call"
            return self._issue(
                call_at, f"found no matching overload for '{name}' ({style} with {count} arguments)"
            )
        return self._undeclared(call_at, name)

    def _not_implemented(self, call_at: tuple[int, int], name: str, library: str) -> Program:
        message = (
            f"function '{name}' ({library}) is part of upstream's CEL environment but not supported here"
        )
        return self._issue(call_at, message)

    _dot_ident_arg = _ident_arg

    def _call(
        self,
        name: str,
        overload: libraries.Overload,
        arg_trees: Sequence[Branch],
        scope: dict[str, int],
        call_at: tuple[int, int],
        *,
        receiver: Program | None = None,
    ) -> Program:
        args = [self.node(arg, scope) for arg in arg_trees]
        if len(args) not in overload.arities if overload.arities is not None else not args:
            style = "receiver call" if receiver is not None else "call"
            message = f"found no matching overload for '{name}' ({style} with {len(args)} arguments)"
            return self._issue(call_at, message)
        if receiver is not None:
            args.insert(0, receiver)
        return programs.call(name, overload.function, args)

    def _has(self, args: Sequence[Branch], scope: dict[str, int], call_at: tuple[int, int]) -> Program:
        selection = unwrap(args[0]) if len(args) == 1 else None
        if not isinstance(selection, lark.Tree) or selection.data != "member_dot":
            return self._issue(call_at, "invalid argument to has() macro", parse=True)
        target_tree, field = selection.children
        self._check_device_field(target_tree, leaf(field), scope)
        return programs.has(self.node(target_tree, scope), str(field))

    def _variable(self, tree: Branch) -> str | None:
        name = ident_name(tree)
        if name is None:
            self._issue(self._at(unwrap(tree)), "argument must be a simple name", parse=True)
        return name

    def _bind(self, args: Sequence[Branch], scope: dict[str, int], call_at: tuple[int, int]) -> Program:
        if len(args) != 3:
            return self._issue(call_at, "cel.bind() requires exactly 3 arguments", parse=True)
        name = self._variable(args[0])
        if name is None:
            return programs.failing("invalid cel.bind")
        slot = self._new_slot()
        init = self.node(args[1], scope)
        body = self.node(args[2], {**scope, name: slot})
        return programs.bind(slot, init, body)

    def _macro(
        self,
        tree: Tree,
        name: str,
        receiver_tree: Branch,
        args: Sequence[Branch],
        scope: dict[str, int],
        call_at: tuple[int, int],
    ) -> Program:
        if len(args) not in ((2,) if name == "filter" else (2, 3)):
            return self._undeclared(call_at, name)
        two_vars = name != "map" and len(args) == 3
        names = [self._variable(arg) for arg in args[: 2 if two_vars else 1]]
        source = self.node(receiver_tree, scope)
        variables = [n for n in names if n is not None]
        if len(variables) < len(names):
            return programs.failing("invalid macro")
        slots = [self._new_slot() for _ in variables]
        inner = {**scope, **dict(zip(variables, slots, strict=True))}
        bodies = [self.node(arg, inner) for arg in args[len(variables) :]]
        cost = self.iteration_costs.setdefault(id(tree), [costs.ITERATION_OVERHEAD[name]])
        return comprehensions.build(name, source, slots, bodies, cost)

    # -- literals ---------------------------------------------------------------------------

    def _list_lit(self, tree: Tree, scope: dict[str, int]) -> Program:
        elements = []
        for element in tree.children:
            inner = subtree(element).children[0]
            optional = isinstance(inner, lark.Tree) and inner.data == "opt_expr"
            elements.append((optional, self.node(subtree(inner).children[0] if optional else inner, scope)))
        return literals.build_list(elements)

    def _map_lit(self, tree: Tree, scope: dict[str, int]) -> Program:
        entries = []
        for entry in tree.children:
            key, value = subtree(entry).children
            optional = isinstance(key, lark.Tree) and key.data == "opt_expr"
            key_program = self.node(subtree(key).children[0] if optional else key, scope)
            entries.append((optional, key_program, self.node(value, scope)))
        return literals.build_map(entries)

    def _literal(self, tree: Tree, scope: dict[str, int]) -> Program:
        token = leaf(tree.children[0])
        try:
            return literals.const(literals.literal_value(token))
        except literals.InvalidLiteral as exc:
            return self._issue(self._at(token), str(exc), parse=True)

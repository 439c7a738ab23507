"""CEL source text to a parse tree: cel-python's lark grammar, extended, plus cel-go error layout.

cel-python 0.5 ships the CEL grammar as `celpy/cel.lark` but its grammar predates CEL's
optional syntax. Rather than rewriting expressions as text (fragile around string literals and
comments), we load that grammar file and apply a few anchored edits before building our own
LALR parser, with the options cel-python uses itself:

- `member_dot_opt: member "." "?" IDENT` for `x.?field`;
- `member_index_opt: member "[" "?" expr "]"` for `x[?key]`;
- list and map literals accept optional elements/keys (`[?x]`, `{?k: v}`) and a trailing comma,
  as cel-go's grammar does; their elements become `list_elem`/`map_entry` nodes.

Every edit asserts that the text it replaces is present, so an incompatible cel-python release
fails loudly at import instead of parsing differently. The parse tree keeps cel-python's node
names; `compiling.py` turns it into a program.

Errors are reported in cel-go's layout (`common/error.go`), which conformance tests compare:
`ERROR: <input>:L:C: message`, then ` | ` and the source line, then ` | ` with one `.` per code
point before the column and `^`. Syntax error wording follows ANTLR's ("mismatched input ...",
"token recognition error at: ...") but the "expecting" sets come from lark, not ANTLR.
"""

from __future__ import annotations

import re
from collections.abc import Iterable
from dataclasses import dataclass
from pathlib import Path
from typing import Final

import celpy
import lark
from celpy.celparser import CELParser
from lark.exceptions import UnexpectedCharacters, UnexpectedInput, UnexpectedToken

__all__ = [
    "Branch",
    "Issue",
    "SyntaxIssues",
    "Tree",
    "format_issues",
    "ident_name",
    "leaf",
    "parse",
    "position",
    "subtree",
    "unwrap",
]

Tree = lark.Tree[lark.Token]
"""A parse tree of the extended grammar: rules are subtrees, terminals are tokens."""
Branch = Tree | lark.Token
"""One child of a `Tree`: a rule's subtree or a terminal's token."""

_GRAMMAR_EDITS: tuple[tuple[str, str], ...] = (
    (
        "member         : member_dot | member_dot_arg | member_index | member_object | primary\n",
        "member         : member_dot | member_dot_arg | member_index | member_object | primary\n"
        "               | member_dot_opt | member_index_opt\n"
        'member_dot_opt : member "." "?" IDENT\n'
        'member_index_opt : member "[" "?" expr "]"\n',
    ),
    (
        'list_lit       : "[" [exprlist] "]"\n',
        'list_lit       : "[" [list_elem ("," list_elem)* [","]] "]"\n'
        "list_elem      : expr | opt_expr\n"
        'opt_expr       : "?" expr\n',
    ),
    (
        'map_lit        : "{" [mapinits] "}"\n',
        'map_lit        : "{" [map_entry ("," map_entry)* [","]] "}"\n'
        'map_entry      : (expr | opt_expr) ":" expr\n',
    ),
)

# How ANTLR names CEL's token classes in its messages; lark's names are mapped onto these.
_TOKEN_CLASS_NAMES = {
    "INT_LIT": "NUM_INT",
    "UINT_LIT": "NUM_UINT",
    "FLOAT_LIT": "NUM_FLOAT",
    "STRING_LIT": "STRING",
    "MLSTRING_LIT": "STRING",
    "BYTES_LIT": "BYTES",
    "IDENT": "IDENTIFIER",
    "BOOL_LIT": "'true', 'false'",
    "NULL_LIT": "'null'",
    "$END": "<EOF>",
}


@dataclass(frozen=True, slots=True)
class Issue:
    """One compile problem at a 1-based line and 1-based column (cel-go displays the same)."""

    line: int
    column: int
    message: str


class SyntaxIssues(Exception):
    """The text does not parse; `issues` holds the located problems."""

    def __init__(self, issues: list[Issue]) -> None:
        super().__init__(issues[0].message if issues else "syntax error")
        self.issues = issues


def _build_parser() -> lark.Lark:
    grammar = (Path(celpy.__file__).parent / "cel.lark").read_text()
    for old, new in _GRAMMAR_EDITS:
        if grammar.count(old) != 1:
            raise RuntimeError(f"cel-python grammar changed; cannot apply edit for {old.strip()!r}")
        grammar = grammar.replace(old, new)
    return lark.Lark(
        grammar,
        parser="lalr",
        start="expr",
        g_regex_flags=re.M,
        lexer_callbacks={"IDENT": CELParser.ambiguous_literals},
        propagate_positions=True,
        maybe_placeholders=False,
        priority="invert",
    )


_PARSER = _build_parser()
_TERMINALS = {t.name: t for t in _PARSER.terminals}


def parse(text: str) -> Tree:
    """Parse CEL text into a lark tree of the extended cel-python grammar.

    Raises:
        SyntaxIssues: the located syntax error (lark stops at the first one).
    """
    try:
        return _PARSER.parse(text)
    except UnexpectedInput as exc:
        raise SyntaxIssues([_syntax_issue(text, exc)]) from None


def _syntax_issue(text: str, exc: UnexpectedInput) -> Issue:
    if isinstance(exc, UnexpectedCharacters):
        # lark declares `pos_in_stream = None` on the base class; its lexer always sets an int.
        pos: int = exc.pos_in_stream  # type: ignore[assignment]
        char = text[pos] if pos < len(text) else ""
        return Issue(exc.line, exc.column, f"Syntax error: token recognition error at: '{char}'")
    expected: Iterable[str] = getattr(exc, "expected", None) or ()
    if isinstance(exc, UnexpectedToken) and exc.token.type != "$END":
        found = exc.token.value
        line, column = exc.token.line or 1, exc.token.column or 1
    else:
        found = "<EOF>"
        line, column = _end_position(text)
    wanted = _describe_expected(expected)
    suffix = f" expecting {wanted}" if wanted else ""
    return Issue(line, column, f"Syntax error: mismatched input '{found}'{suffix}")


def _end_position(text: str) -> tuple[int, int]:
    lines = text.split("\n")
    return len(lines), len(lines[-1]) + 1


def position(text: str, offset: int) -> tuple[int, int]:
    """1-based (line, column) of a character offset, columns counted in code points like cel-go."""
    line_start = text.rfind("\n", 0, offset) + 1
    return text.count("\n", 0, offset) + 1, offset - line_start + 1


def _describe_expected(names: Iterable[str]) -> str:
    described = set()
    for name in names:
        if name in _TOKEN_CLASS_NAMES:
            described.add(_TOKEN_CLASS_NAMES[name])
            continue
        terminal = _TERMINALS.get(name)
        if terminal is not None and terminal.pattern.type == "str":
            described.add(f"'{terminal.pattern.value}'")
    if not described:
        return ""
    ordered = sorted(described)
    return ordered[0] if len(ordered) == 1 else "{" + ", ".join(ordered) + "}"


def format_issues(text: str, issues: Iterable[Issue]) -> str:
    """cel-go's `Errors.ToDisplayString`: issues sorted by position, one block each."""
    lines = text.split("\n")
    blocks = []
    for issue in sorted(issues, key=lambda i: (i.line, i.column)):
        block = f"ERROR: <input>:{issue.line}:{issue.column}: {issue.message}"
        if 1 <= issue.line <= len(lines):
            snippet = lines[issue.line - 1].replace("\t", " ")
            marker = "".join("." if ord(c) < 0x80 else "\uff0e" for c in snippet[: issue.column - 1])
            under = snippet[issue.column - 1 : issue.column]
            hat = "\uff3e" if under and ord(under) >= 0x80 else "^"
            block += f"\n | {snippet}\n | {marker}{hat}"
        blocks.append(block)
    return "\n".join(blocks)


_PASS_THROUGH: Final = frozenset(
    {"expr", "conditionalor", "conditionaland", "relation", "addition", "multiplication", "unary", "member"}
)


def subtree(branch: Branch) -> Tree:
    """`branch` where the grammar places a rule, never a terminal."""
    assert isinstance(branch, lark.Tree), branch
    return branch


def leaf(branch: Branch) -> lark.Token:
    """`branch` where the grammar places a terminal (an identifier, a literal), never a rule."""
    assert isinstance(branch, lark.Token), branch
    return branch


def unwrap(tree: Branch) -> Branch:
    """Skip the single-child chain nodes and parentheses, which carry no meaning of their own."""
    while isinstance(tree, lark.Tree):
        if (tree.data in _PASS_THROUGH and len(tree.children) == 1) or tree.data in ("primary", "paren_expr"):
            tree = tree.children[0]
        else:
            break
    return tree


def ident_name(tree: Branch) -> str | None:
    """The name if `tree` is (after unwrapping) a plain identifier."""
    node = unwrap(tree)
    if isinstance(node, lark.Tree) and node.data == "ident":
        return str(node.children[0])
    return None

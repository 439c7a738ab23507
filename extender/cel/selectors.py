"""Compiled device selectors and the compile cache: the public face of the CEL package.

`compile_selector(text)` parses (`parsing.py`), checks and compiles (`compiling.py`) a selector
once per distinct text, and refuses one whose estimated cost (`costs.py`) is over upstream's
limit. Results are kept in an LRU keyed by the text, failures included, so a
broken selector that every node's filter call meets is parsed once, not once per node; the
scheduler plugin keeps a similar cache (`cel.NewCache`). The cache is shared by all threads:
one lock guards it, compilation itself runs outside the lock, and when two threads compile the
same new text at once the first to finish is kept and returned to both.

`CompiledSelector.evaluate(device)` runs the program against a `DeviceInput` built once per
device (`devices.py`). It allocates only the program's small slot list; no environments, no
activations. The result must be a bool, as upstream requires.
"""

from __future__ import annotations

import threading
from collections import OrderedDict
from collections.abc import Callable
from typing import Any

from extender.cel import footprint
from extender.cel.compiling import COST_BUDGET, CompileIssues, Program, compile_tree
from extender.cel.comprehensions import budget_cell
from extender.cel.costs import MAX_COST, TOO_COMPLEX
from extender.cel.devices import DeviceInput
from extender.cel.parsing import Issue, SyntaxIssues, format_issues, parse
from extender.cel.values import EVAL_ERRORS, Interrupted, as_cel_error, type_name
from extender.errors import CelCompileError, CelRuntimeError, SelectorsInterrupted

#: How many distinct selector texts stay compiled; read at each insertion, so it can be tuned live
#: (`Settings.cel_compile_cache_size`, `set_compile_cache_size`).
COMPILE_CACHE_SIZE = 4096
#: Upstream's `CELSelectorExpressionMaxLength`, in bytes of UTF-8 as Go's `len()` counts.
MAX_EXPRESSION_LENGTH = 10240


def interrupted(cause: str) -> str:
    """The text of `SelectorsInterrupted`: upstream's abort, then what was cut short."""
    return f"filter operation aborted: {cause} (while evaluating CEL selectors; a retry continues from there)"


class CompiledSelector:
    """A compiled, immutable selector; safe to evaluate from any number of threads."""

    __slots__ = ("_program", "_template", "expression")

    def __init__(self, expression: str, program: Program, slots: int) -> None:
        self.expression = expression
        self._program = program
        self._template: list[Any] = [None] * slots

    def evaluate(self, device: DeviceInput, *, should_stop: Callable[[], str | None] | None = None) -> bool:
        """Whether the device matches.

        Args:
            device: the device's CEL input.
            should_stop: polled about every millisecond of comprehension steps (the caller's
                deadline); a non-empty cause stops the evaluation.

        Raises:
            CelRuntimeError: any runtime error (missing key, no such overload, bad semver, a
                non-bool result, exceeded budget); upstream aborts the allocation for these.
            SelectorsInterrupted: `should_stop` gave a cause (`interrupted`'s text); nothing is
                known about the device, so nothing may be cached for it.
        """
        result = self.value(device, should_stop=should_stop)
        if type(result) is bool:
            return result
        raise CelRuntimeError(f"CEL result of type {type_name(result)} could not be converted to bool")

    def value(self, device: DeviceInput, *, should_stop: Callable[[], str | None] | None = None) -> Any:
        """The expression's value for the device, whatever its type (`evaluate` requires a bool;
        derived attributes take scalars and lists). Raises as `evaluate` does."""
        env = self._template.copy()
        env[0] = device.root
        env[1] = budget_cell(COST_BUDGET, should_stop)
        try:
            return self._program(env)
        except Interrupted as exc:
            raise SelectorsInterrupted(interrupted(exc.cause)) from None
        except EVAL_ERRORS as exc:
            raise CelRuntimeError(str(as_cel_error(exc))) from exc
        except RecursionError:
            raise CelRuntimeError("expression nesting exceeds the evaluation depth limit") from None

    def __repr__(self) -> str:
        return f"CompiledSelector({self.expression!r})"


class _Cache:
    """An LRU of compile outcomes (a selector or the compile error's detail), keyed by text."""

    def __init__(self) -> None:
        self._lock = threading.Lock()
        self._entries: OrderedDict[str, CompiledSelector | str] = OrderedDict()

    def get(self, key: str) -> CompiledSelector | str | None:
        with self._lock:
            entry = self._entries.get(key)
            if entry is not None:
                self._entries.move_to_end(key)
            return entry

    def put(self, key: str, entry: CompiledSelector | str) -> CompiledSelector | str:
        with self._lock:
            existing = self._entries.get(key)
            if existing is not None:
                self._entries.move_to_end(key)
                return existing
            self._entries[key] = entry
            while len(self._entries) > max(COMPILE_CACHE_SIZE, 0):
                self._entries.popitem(last=False)
            return entry

    def clear(self) -> None:
        with self._lock:
            self._entries.clear()

    def __len__(self) -> int:
        return len(self._entries)


_CACHE = _Cache()


def set_compile_cache_size(size: int) -> None:
    """How many selector texts stay compiled, and their footprints remembered, from now on
    (wiring: `cel_compile_cache_size`)."""
    global COMPILE_CACHE_SIZE
    if size < 1:
        raise ValueError(f"CEL compile cache size must be at least 1, not {size}")
    COMPILE_CACHE_SIZE = size
    if size != footprint.CACHE_SIZE:
        footprint.set_cache_size(size)


def compile_selector(expression: str) -> CompiledSelector:
    """The compiled selector for this text, compiled on first use and cached.

    Raises:
        CelCompileError: syntax errors, undeclared references and other checks, in cel-go's
            layout after "compilation failed: ", or an over-long expression.
    """
    entry = _CACHE.get(expression)
    if entry is None:
        entry = _CACHE.put(expression, _compile(expression))
    if isinstance(entry, str):
        raise CelCompileError(entry)
    return entry


def clear_compile_cache() -> None:
    """Forget every compiled selector (tests; configuration reloads)."""
    _CACHE.clear()


def _compile(expression: str) -> CompiledSelector | str:
    size = len(expression.encode("utf-8", errors="surrogatepass"))
    if size > MAX_EXPRESSION_LENGTH:
        return f"expression too long: {size} bytes, more than the maximum of {MAX_EXPRESSION_LENGTH}"
    try:
        program, slots, cost = compile_tree(expression, parse(expression))
    except (SyntaxIssues, CompileIssues) as exc:
        return "compilation failed: " + format_issues(expression, exc.issues)
    except RecursionError:
        issue = Issue(1, 1, "expression recursion limit exceeded")
        return "compilation failed: " + format_issues(expression, [issue])
    if cost > MAX_COST:
        # API validation's verdict (upstream never lets such a selector into a claim or class).
        return f"{TOO_COMPLEX} (estimated cost {cost}, limit {MAX_COST})"
    return CompiledSelector(expression, program, slots)

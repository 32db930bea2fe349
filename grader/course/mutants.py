"""Mutants of a reference: each the reference with one small change made on its syntax tree, named by operator and
line, in a fixed order.

Operators (each site of each yields one mutant):
- `compare`: a comparison's boundary or sense flipped (`<` and `<=`, `>` and `>=`, `==` and `!=`, `in`, `is`).
- `constant`: a number shifted by one (`0.2` to `1.2`, `1` to `2`); dims, bools and message text are left alone.
- `operator`: an arithmetic, bitwise or boolean operator swapped (`+` and `-`, `*` and `/`, `&` and `|`, `and`
  and `or`).
- `unary`: a negation, `not` or `~` dropped.
- `reduction`: a reduction or its twin swapped (`sum` and `mean`, `max` and `min`, `softmax` and `log_softmax`...).
- `where`: the two branches of a `where` swapped.
- `dim`: a dim argument moved to another axis, or `keepdim` flipped.
- `drop_statement`: a statement of a function removed, where every name it binds is still bound afterwards.
- `drop_raise`: a `raise` removed.
- `drop_detach`, `drop_cast`: a `.detach()`, or a `.to(...)`/`.float()`/`.long()`..., removed.
- `insert_detach`, `insert_cast`: the value an assignment or a `return` gives detached, or moved to the other
  float precision (float32 to float64, any other float to float32), where it is a tensor.

The module docstring, annotations, imports, f-strings and what a `raise` says are never mutated: they change no
behaviour a case can see but a message.
"""

from __future__ import annotations

import ast
import copy
from collections.abc import Callable
from dataclasses import dataclass

OPERATORS = (
    "compare",
    "constant",
    "operator",
    "unary",
    "reduction",
    "where",
    "dim",
    "drop_statement",
    "drop_raise",
    "drop_detach",
    "drop_cast",
    "insert_detach",
    "insert_cast",
)

COMPARE_FLIPS: dict[type[ast.cmpop], type[ast.cmpop]] = {
    ast.Lt: ast.LtE,
    ast.LtE: ast.Lt,
    ast.Gt: ast.GtE,
    ast.GtE: ast.Gt,
    ast.Eq: ast.NotEq,
    ast.NotEq: ast.Eq,
    ast.In: ast.NotIn,
    ast.NotIn: ast.In,
    ast.Is: ast.IsNot,
    ast.IsNot: ast.Is,
}
BINOP_SWAPS: dict[type[ast.operator], type[ast.operator]] = {
    ast.Add: ast.Sub,
    ast.Sub: ast.Add,
    ast.Mult: ast.Div,
    ast.Div: ast.Mult,
    ast.FloorDiv: ast.Div,
    ast.Mod: ast.FloorDiv,
    ast.Pow: ast.Mult,
    ast.BitAnd: ast.BitOr,
    ast.BitOr: ast.BitAnd,
    ast.BitXor: ast.BitOr,
}
SYMBOLS: dict[type[ast.AST], str] = {
    ast.Lt: "<",
    ast.LtE: "<=",
    ast.Gt: ">",
    ast.GtE: ">=",
    ast.Eq: "==",
    ast.NotEq: "!=",
    ast.In: "in",
    ast.NotIn: "not in",
    ast.Is: "is",
    ast.IsNot: "is not",
    ast.Add: "+",
    ast.Sub: "-",
    ast.Mult: "*",
    ast.Div: "/",
    ast.FloorDiv: "//",
    ast.Mod: "%",
    ast.Pow: "**",
    ast.BitAnd: "&",
    ast.BitOr: "|",
    ast.BitXor: "^",
    ast.And: "and",
    ast.Or: "or",
    ast.USub: "-",
    ast.Not: "not",
    ast.Invert: "~",
}
_PAIRS = [
    ("sum", "mean"),
    ("max", "min"),
    ("amax", "amin"),
    ("maximum", "minimum"),
    ("argmax", "argmin"),
    ("any", "all"),
    ("softmax", "log_softmax"),
    ("clamp_min", "clamp_max"),
    ("exp", "log"),
    ("cumsum", "cumprod"),
]
REDUCTION_SWAPS = {**dict(_PAIRS), **{b: a for a, b in _PAIRS}}
# methods whose first positional argument is a dim (a `torch.` function's first is its input)
DIM_FIRST = frozenset(
    {"gather", "scatter", "squeeze", "unsqueeze", "softmax", "log_softmax", "cumsum", "cumprod", "logsumexp"}
    | {"sum", "mean", "amax", "amin", "argmax", "argmin", "all", "any", "std", "var", "sort", "flip"}
)
CASTS = frozenset({"to", "float", "double", "half", "bfloat16", "long", "int", "bool"})
# what the inserted operators call: defined in the mutant itself, so a value that is not a tensor passes unchanged
HELPERS = """

def _mutant_detach(value):
    import torch
    return value.detach() if isinstance(value, torch.Tensor) else value


def _mutant_cast(value):
    import torch
    if not (isinstance(value, torch.Tensor) and value.is_floating_point()):
        return value
    return value.to(torch.float64 if value.dtype == torch.float32 else torch.float32)
"""


@dataclass(frozen=True)
class Mutant:
    """The reference with one change: `operator` at `line`, said by `description`; `source` is the whole file."""

    name: str
    operator: str
    line: int
    description: str
    source: str


def _int_value(node: ast.AST) -> int | None:
    """An int literal, `-1` included; None for anything else (a bool is not a dim)."""
    if isinstance(node, ast.UnaryOp) and isinstance(node.op, ast.USub):
        inner = _int_value(node.operand)
        return None if inner is None else -inner
    if isinstance(node, ast.Constant) and type(node.value) is int:
        return node.value
    return None


def _key(node: ast.AST) -> tuple[int, int]:
    return (getattr(node, "lineno", 0), getattr(node, "col_offset", 0))


def _is_torch(node: ast.AST) -> bool:
    return isinstance(node, ast.Name) and node.id == "torch"


def _dim_arguments(tree: ast.Module) -> set[tuple[int, int]]:
    """Every dim argument of a call, by the position of its value: the `constant` operator leaves them to `dim`."""
    found: set[tuple[int, int]] = set()
    for node in ast.walk(tree):
        if not isinstance(node, ast.Call):
            continue
        for keyword in node.keywords:
            if keyword.arg == "dim" and _int_value(keyword.value) is not None:
                found.add(_key(keyword.value))
        func = node.func
        if isinstance(func, ast.Attribute) and func.attr in DIM_FIRST and not _is_torch(func.value) and node.args:
            if _int_value(node.args[0]) is not None:
                found.add(_key(node.args[0]))
    return found


def _bound_names(node: ast.AST) -> set[str]:
    return {n.id for n in ast.walk(node) if isinstance(n, ast.Name) and isinstance(n.ctx, ast.Store)}


def _droppable(function: ast.FunctionDef) -> set[tuple[int, int]]:
    """The statements of `function` whose removal leaves it runnable: each name they bind is bound on the way to
    them (by the statements that run before them) or never read after them. A `return`, a `raise` (the `drop_raise`
    operator's) and an `if` that ends by raising (removing it is removing its raise) are left out."""
    arguments = function.args
    params = {a.arg for a in (*arguments.posonlyargs, *arguments.args, *arguments.kwonlyargs)}
    loads = [n for n in ast.walk(function) if isinstance(n, ast.Name) and isinstance(n.ctx, ast.Load)]
    found = set()
    for statement, before in _statements_with_bindings(function.body, params):
        if isinstance(statement, (ast.Return, ast.Raise, ast.Pass)) or _is_docstring(statement):
            continue
        if isinstance(statement, ast.If) and isinstance(statement.body[-1], ast.Raise) and not statement.orelse:
            continue
        end = statement.end_lineno or statement.lineno
        read_after = {n.id for n in loads if n.lineno > end}
        if all(name in before or name not in read_after for name in _bound_names(statement)):
            found.add(_key(statement))
    return found


def _statements_with_bindings(body: list[ast.stmt], bound: set[str]) -> list[tuple[ast.stmt, set[str]]]:
    """Each statement of `body`, nested ones included, with the names bound whenever it runs: the function's
    parameters and what the statements before it on its own path bind (never a sibling branch's)."""
    found = []
    bound = set(bound)
    for statement in body:
        found.append((statement, set(bound)))
        for field in ("body", "orelse", "finalbody"):
            inner = getattr(statement, field, None)
            if isinstance(inner, list) and inner and isinstance(inner[0], ast.stmt):
                found += _statements_with_bindings(inner, bound)
        bound |= _bound_names(statement)
    return found


def _is_docstring(statement: ast.stmt) -> bool:
    return (
        isinstance(statement, ast.Expr)
        and isinstance(statement.value, ast.Constant)
        and isinstance(statement.value.value, str)
    )


def _wrapper(helper: str, value: ast.expr) -> Callable[[], ast.AST]:
    return lambda: ast.Call(func=ast.Name(id=helper, ctx=ast.Load()), args=[copy.deepcopy(value)], keywords=[])


INSERTS = (
    ("insert_detach", "_mutant_detach", "detached"),
    ("insert_cast", "_mutant_cast", "in the other float precision"),
)


class _Mutator(ast.NodeTransformer):
    """Counts every site in a fixed order (children before their parent, fields in source order); with a `target`,
    applies the mutation at that site alone."""

    def __init__(self, facts: _Facts, target: int | None) -> None:
        self.target = target
        self.sites: list[tuple[str, int, str]] = []
        self.dims, self.droppable = facts.dims, facts.droppable
        self.in_function = 0
        self.helpers_used = False

    def _offer(
        self, node: ast.AST, operator: str, description: str, make: Callable[[], ast.AST | None]
    ) -> ast.AST | None:
        """Count a site; at the target, the mutated node (None removes a statement)."""
        index = len(self.sites)
        self.sites.append((operator, getattr(node, "lineno", 0), description))
        if index != self.target:
            return node
        mutated = make()
        return ast.copy_location(mutated, node) if mutated is not None else None

    # ------------------------------------------------------------------ what is never mutated

    def visit_Import(self, node: ast.Import) -> ast.AST | None:
        return node

    def visit_ImportFrom(self, node: ast.ImportFrom) -> ast.AST | None:
        return node

    def visit_JoinedStr(self, node: ast.JoinedStr) -> ast.AST | None:
        return node

    def visit_arg(self, node: ast.arg) -> ast.AST | None:
        return node  # annotations only

    def visit_AnnAssign(self, node: ast.AnnAssign) -> ast.AST | None:
        if node.value is not None:
            node.value = self.visit(node.value)
        return self._statement(node)

    def visit_FunctionDef(self, node: ast.FunctionDef) -> ast.AST | None:
        node.args = self.visit(node.args)
        self.in_function += 1
        node.body = self._body(node.body)
        self.in_function -= 1
        return node

    def visit_Expr(self, node: ast.Expr) -> ast.AST | None:
        if _is_docstring(node):
            return node
        node.value = self.visit(node.value)
        return self._statement(node)

    def _body(self, statements: list[ast.stmt]) -> list[ast.stmt]:
        kept = []
        for statement in statements:
            visited = self.visit(statement)
            if visited is not None:
                kept.append(visited)
        return kept or [ast.Pass()]

    # ------------------------------------------------------------------ statements

    def visit_Raise(self, node: ast.Raise) -> ast.AST | None:
        return self._offer(node, "drop_raise", "`raise` removed", ast.Pass)

    def visit_If(self, node: ast.If) -> ast.AST | None:
        node.test = self.visit(node.test)
        node.body = self._body(node.body)
        node.orelse = self._body(node.orelse) if node.orelse else []
        return self._statement(node)

    def visit_Assign(self, node: ast.Assign) -> ast.AST | None:
        node.value = self.visit(node.value)
        if self.in_function and len(node.targets) == 1 and isinstance(node.targets[0], ast.Name):
            if isinstance(node.value, (ast.Call, ast.BinOp, ast.UnaryOp, ast.Subscript)):
                node.value = self._wrap(node.value, f"`{node.targets[0].id}`")
        return self._statement(node)

    def visit_AugAssign(self, node: ast.AugAssign) -> ast.AST | None:
        node.value = self.visit(node.value)
        self._swap_binop(node)
        return self._statement(node)

    def visit_Return(self, node: ast.Return) -> ast.AST | None:
        if node.value is None:
            return node
        node.value = self.visit(node.value)
        if isinstance(node.value, ast.Tuple):
            node.value.elts = [self._wrap(item, f"returned item {i}") for i, item in enumerate(node.value.elts)]
        else:
            node.value = self._wrap(node.value, "the returned value")
        return node

    def _statement(self, node: ast.stmt) -> ast.AST | None:
        if self.in_function and _key(node) in self.droppable:
            line = ast.unparse(node).splitlines()[0] if self.target is None else ""  # only the survey names sites
            return self._offer(node, "drop_statement", f"`{line[:60]}` removed", lambda: None)
        return node

    def _wrap(self, value: ast.expr, what: str) -> ast.expr:
        """`value`, or at the target its detached or recast twin."""
        for operator, helper, done in INSERTS:
            replaced = self._offer(value, operator, f"{what} {done}", _wrapper(helper, value))
            if isinstance(replaced, ast.expr) and replaced is not value:
                self.helpers_used = True
                return replaced
        return value

    # ------------------------------------------------------------------ expressions

    def visit_Compare(self, node: ast.Compare) -> ast.AST | None:
        self.generic_visit(node)
        for index, op in enumerate(list(node.ops)):
            flipped = COMPARE_FLIPS.get(type(op))
            if flipped is None:
                continue
            description = f"`{SYMBOLS[type(op)]}` to `{SYMBOLS[flipped]}`"

            def make(index: int = index, flipped: type[ast.cmpop] = flipped) -> ast.AST:
                mutated = copy.deepcopy(node)
                mutated.ops[index] = flipped()
                return mutated

            result = self._offer(node, "compare", description, make)
            if result is not node:
                return result
        return node

    def visit_Constant(self, node: ast.Constant) -> ast.AST | None:
        value = node.value
        if isinstance(value, bool) or not isinstance(value, (int, float)) or _key(node) in self.dims:
            return node
        shifted = value + 1
        return self._offer(node, "constant", f"`{value!r}` to `{shifted!r}`", lambda: ast.Constant(shifted))

    def visit_UnaryOp(self, node: ast.UnaryOp) -> ast.AST | None:
        if _key(node) in self.dims:
            return node
        self.generic_visit(node)
        if isinstance(node.op, (ast.USub, ast.Not, ast.Invert)):
            description = f"`{SYMBOLS[type(node.op)]}` removed"
            return self._offer(node, "unary", description, lambda: copy.deepcopy(node.operand))
        return node

    def visit_BinOp(self, node: ast.BinOp) -> ast.AST | None:
        self.generic_visit(node)
        return self._swap_binop(node)

    def _swap_binop(self, node: ast.BinOp | ast.AugAssign) -> ast.AST | None:
        swapped = BINOP_SWAPS.get(type(node.op))
        if swapped is None:
            return node

        def make() -> ast.AST:
            mutated = copy.deepcopy(node)
            mutated.op = swapped()
            return mutated

        description = f"`{SYMBOLS[type(node.op)]}` to `{SYMBOLS[swapped]}`"
        result = self._offer(node, "operator", description, make)
        if isinstance(node, ast.AugAssign) and isinstance(result, ast.AugAssign) and result is not node:
            node.op = result.op  # the statement itself stays, for `drop_statement`
            return node
        return result

    def visit_BoolOp(self, node: ast.BoolOp) -> ast.AST | None:
        self.generic_visit(node)
        other: type[ast.boolop] = ast.Or if isinstance(node.op, ast.And) else ast.And

        def make() -> ast.AST:
            return ast.BoolOp(op=other(), values=copy.deepcopy(node.values))

        return self._offer(node, "operator", f"`{SYMBOLS[type(node.op)]}` to `{SYMBOLS[other]}`", make)

    def visit_Call(self, node: ast.Call) -> ast.AST | None:
        self.generic_visit(node)
        func = node.func
        name = func.attr if isinstance(func, ast.Attribute) else func.id if isinstance(func, ast.Name) else ""
        mutations: list[tuple[str, str, Callable[[], ast.AST]]] = []
        if name in REDUCTION_SWAPS and (isinstance(func, ast.Attribute) or name in ("max", "min")):
            mutations.append(("reduction", f"`{name}` to `{REDUCTION_SWAPS[name]}`", self._renamed(node)))
        if name == "where" and len(node.args) == 3:
            mutations.append(("where", "`where` branches swapped", self._where_swapped(node)))
        mutations += self._dim_mutations(node)
        if isinstance(func, ast.Attribute) and not _is_torch(func.value):
            if name == "detach" and not node.args:
                mutations.append(("drop_detach", "`.detach()` removed", lambda: copy.deepcopy(func.value)))
            elif name in CASTS:
                mutations.append(("drop_cast", f"`.{name}(...)` removed", lambda: copy.deepcopy(func.value)))
        for operator, description, make in mutations:
            result = self._offer(node, operator, description, make)
            if result is not node:
                return result
        return node

    @staticmethod
    def _renamed(node: ast.Call) -> Callable[[], ast.AST]:
        def make() -> ast.AST:
            mutated = copy.deepcopy(node)
            if isinstance(mutated.func, ast.Attribute):
                mutated.func.attr = REDUCTION_SWAPS[mutated.func.attr]
            elif isinstance(mutated.func, ast.Name):
                mutated.func.id = REDUCTION_SWAPS[mutated.func.id]
            return mutated

        return make

    @staticmethod
    def _where_swapped(node: ast.Call) -> Callable[[], ast.AST]:
        def make() -> ast.AST:
            mutated = copy.deepcopy(node)
            mutated.args[1], mutated.args[2] = mutated.args[2], mutated.args[1]
            return mutated

        return make

    def _dim_mutations(self, node: ast.Call) -> list[tuple[str, str, Callable[[], ast.AST]]]:
        found: list[tuple[str, str, Callable[[], ast.AST]]] = []
        for index, argument in enumerate(node.args):
            if _key(argument) in self.dims and (old := _int_value(argument)) is not None:
                found.append(("dim", f"dim `{old}` to `{_other_dim(old)}`", _with_arg(node, index, _other_dim(old))))
        for index, keyword in enumerate(node.keywords):
            if keyword.arg == "dim" and (old := _int_value(keyword.value)) is not None:
                found.append(
                    ("dim", f"dim `{old}` to `{_other_dim(old)}`", _with_keyword(node, index, _other_dim(old)))
                )
            if (
                keyword.arg == "keepdim"
                and isinstance(keyword.value, ast.Constant)
                and type(keyword.value.value) is bool
            ):
                flipped = not keyword.value.value
                found.append(
                    ("dim", f"keepdim `{keyword.value.value}` to `{flipped}`", _with_keyword(node, index, flipped))
                )
        return found


def _other_dim(dim: int) -> int:
    return 1 if dim == 0 else 0


def _with_arg(node: ast.Call, index: int, value: int) -> Callable[[], ast.AST]:
    def make() -> ast.AST:
        mutated = copy.deepcopy(node)
        mutated.args[index] = ast.Constant(value)
        return mutated

    return make


def _with_keyword(node: ast.Call, index: int, value: int | bool) -> Callable[[], ast.AST]:
    def make() -> ast.AST:
        mutated = copy.deepcopy(node)
        mutated.keywords[index].value = ast.Constant(value)
        return mutated

    return make


@dataclass(frozen=True)
class _Facts:
    """What the operators need to know of the whole source, by position: the same for every parse of it."""

    dims: frozenset[tuple[int, int]]
    droppable: frozenset[tuple[int, int]]

    @classmethod
    def of(cls, tree: ast.Module) -> _Facts:
        droppable = {k for f in ast.walk(tree) if isinstance(f, ast.FunctionDef) for k in _droppable(f)}
        return cls(frozenset(_dim_arguments(tree)), frozenset(droppable))


def _walk(source: str, target: int | None, facts: _Facts | None = None) -> tuple[ast.Module, _Mutator]:
    tree = ast.parse(source)
    mutator = _Mutator(facts or _Facts.of(tree), target)
    for index, statement in enumerate(list(tree.body)):
        if index == 0 and _is_docstring(statement):
            continue
        tree.body[index] = mutator.visit(statement)
    return tree, mutator


def mutants(source: str) -> list[Mutant]:
    """Every mutant of `source`, in a fixed order; each named `operator@Lline`, with `#k` for the k-th site of the
    same operator on that line."""
    facts = _Facts.of(ast.parse(source))
    _, survey = _walk(source, None, facts)
    seen: dict[tuple[str, int], int] = {}
    found = []
    for index, (operator, line, description) in enumerate(survey.sites):
        seen[(operator, line)] = seen.get((operator, line), 0) + 1
        ordinal = seen[(operator, line)]
        name = f"{operator}@L{line}" + (f"#{ordinal}" if ordinal > 1 else "")
        tree, mutator = _walk(source, index, facts)
        text = ast.unparse(ast.fix_missing_locations(tree)) + "\n"
        if mutator.helpers_used:
            text += HELPERS
        found.append(Mutant(name, operator, line, description, text))
    return found


def unmutated(source: str) -> str:
    """`source` as the mutants are written (through the same unparse), with no change: the control."""
    return ast.unparse(ast.parse(source)) + "\n"

"""A small PromQL reader: the label names each part of an expression carries, and each problem it finds.

Why: a dashboard panel or an alert grouped by, matched on or showing a label its series do not carry
goes blank without an error. The reader is given the series a server exports, with their label names
(``tests/deploy/exported.py``), and checks every name and label an expression uses against them.
"""

from __future__ import annotations

import re
from collections.abc import Iterable, Mapping
from dataclasses import dataclass

Labels = frozenset[str] | None  # the label names of an expression's series; None: not known


_TOKEN = re.compile(
    r"""(?P<space>\s+|\#[^\n]*)
      | (?P<string>"(?:\\.|[^"\\])*"|'(?:\\.|[^'\\])*'|`[^`]*`)
      | (?P<range>\[[^\]]*\])
      | (?P<number>0[xX][0-9a-fA-F]+|(?:\d+(?:ms|[smhdwy]))+(?![\w.])|\d*\.?\d+(?:[eE][+-]?\d+)?|\$\{?\w+\}?)
      | (?P<name>[a-zA-Z_:][a-zA-Z0-9_:]*)
      | (?P<op>==|!=|>=|<=|=~|!~|[-+*/%^<>=(){},@])""",
    re.VERBOSE,
)
_PRECEDENCE = {"or": 1, "and": 2, "unless": 2, "==": 3, "!=": 3, "<": 3, "<=": 3, ">": 3, ">=": 3,
               "+": 4, "-": 4, "*": 5, "/": 5, "%": 5, "atan2": 5, "^": 6}  # fmt: skip
_AGGREGATIONS = {"sum", "avg", "min", "max", "count", "group", "stddev", "stdvar", "topk", "bottomk", "quantile",
                 "count_values", "limitk", "limit_ratio"}  # fmt: skip
_KEEP_ALL = {"topk", "bottomk", "limitk", "limit_ratio"}  # the grouping picks series; each keeps its labels
_SCALAR_FUNCTIONS = {"time", "pi", "scalar"}


def _tokens(expr: str) -> list[tuple[str | None, str]]:
    tokens = []
    pos = 0
    while pos < len(expr):
        if (match := _TOKEN.match(expr, pos)) is None:
            raise ValueError(f"cannot read PromQL at {expr[pos : pos + 20]!r}")
        if match.lastgroup != "space":
            tokens.append((match.lastgroup, match.group()))
        pos = match.end()
    return tokens


@dataclass(frozen=True)
class _Value:
    labels: Labels
    is_scalar: bool = False
    text: str | None = None  # a string literal's value


def _union(a: Labels, b: Iterable[str] | None) -> Labels:
    return None if a is None or b is None else a | set(b)


class Reader:
    """A recursive-descent PromQL reader that yields the labels of each subexpression and notes each problem."""

    def __init__(self, expr: str, series: Mapping[str, Labels]) -> None:
        self.tokens = _tokens(expr)
        self.series = series
        self.pos = 0
        self.problems: list[str] = []

    def read(self) -> _Value:
        value = self.expr(1)
        if self.pos != len(self.tokens):
            raise ValueError(f"unexpected {self.peek()!r} in PromQL")
        return value

    def peek(self) -> str:
        return self.tokens[self.pos][1] if self.pos < len(self.tokens) else ""

    def take(self, expected: str | None = None) -> tuple[str | None, str]:
        if self.pos == len(self.tokens) or (expected is not None and self.peek() != expected):
            raise ValueError(f"expected {expected or 'more'!r} in PromQL, found {self.peek()!r}")
        self.pos += 1
        return self.tokens[self.pos - 1]

    def need(self, wanted: Iterable[str], have: Labels, where: str) -> None:
        if have is not None:
            self.problems += [f"{where}: no series has label {x!r} (they have {sorted(have)})" for x in wanted
                              if x not in have]  # fmt: skip

    def label_list(self) -> list[str]:
        self.take("(")
        names = []
        while self.peek() != ")":
            names.append(self.take()[1])
            if self.peek() == ",":
                self.take()
        self.take(")")
        return names

    def expr(self, min_precedence: int) -> _Value:
        left = self.unary()
        while (op := self.peek()) in _PRECEDENCE and _PRECEDENCE[op] >= min_precedence:
            self.take()
            if self.peek() == "bool":
                self.take()
            on = ignoring = group = None
            if self.peek() in ("on", "ignoring"):
                on, ignoring = (self.label_list(), None) if self.take()[1] == "on" else (None, self.label_list())
            if self.peek() in ("group_left", "group_right"):
                side = self.take()[1]
                group = (side, self.label_list() if self.peek() == "(" else [])
            right = self.expr(_PRECEDENCE[op] + (op != "^"))
            left = self.binary(op, left, right, on, ignoring, group)
        return left

    def binary(self, op: str, left: _Value, right: _Value, on: list[str] | None, ignoring: list[str] | None,
               group: tuple[str, list[str]] | None) -> _Value:  # fmt: skip
        if left.is_scalar or right.is_scalar:
            return right if left.is_scalar else left
        for name in on or ():
            self.need([name], left.labels, f"on ({name}), left side")
            self.need([name], right.labels, f"on ({name}), right side")
        self.need(ignoring or (), _union(left.labels, right.labels), "ignoring")
        if op == "or":
            return _Value(_union(left.labels, right.labels))
        if group is not None:
            keep, other = (left, right) if group[0] == "group_left" else (right, left)
            self.need(group[1], other.labels, group[0])
            return _Value(_union(keep.labels, group[1]))
        if on is not None and op not in ("and", "unless"):
            return _Value(frozenset(on))
        return _Value(None if left.labels is None else left.labels - set(ignoring or ()))

    def unary(self) -> _Value:
        if self.peek() in ("-", "+"):
            self.take()
            return self.unary()
        return self.postfix(self.primary())

    def postfix(self, value: _Value) -> _Value:
        while True:
            kind, text = self.tokens[self.pos] if self.pos < len(self.tokens) else (None, "")
            if kind == "range":  # a range or a subquery: the same series
                self.take()
            elif text in ("offset", "@"):
                self.take()
                if self.peek() == "-":
                    self.take()
                if self.take()[1] in ("start", "end"):
                    self.take("(")
                    self.take(")")
            else:
                return value

    def primary(self) -> _Value:
        kind, text = self.take()
        if kind == "number":
            return _Value(frozenset(), is_scalar=True)
        if kind == "string":
            return _Value(frozenset(), is_scalar=True, text=text[1:-1])
        if text == "(":
            value = self.expr(1)
            self.take(")")
            return value
        if text == "{":
            self.pos -= 1
            return self.selector(None)
        if kind != "name":
            raise ValueError(f"unexpected {text!r} in PromQL")
        if text in _AGGREGATIONS:
            return self.aggregation(text)
        if self.peek() == "(":
            return self.call(text)
        return self.selector(text)

    def selector(self, name: str | None) -> _Value:
        labels: Labels = None
        if name is not None and name.startswith("turbotts"):
            if name not in self.series:
                self.problems.append(f"{name} is not exported")
            else:
                labels = self.series[name]
        if self.peek() == "{":
            self.take()
            while self.peek() != "}":
                label = self.take()[1]
                self.take()  # the match operator
                self.take()  # the value
                if labels is not None and label not in labels and label != "__name__":
                    self.problems.append(f"{name} has no label {label!r} (it has {sorted(labels)})")
                if self.peek() == ",":
                    self.take()
            self.take("}")
        return _Value(labels)

    def arguments(self) -> list[_Value]:
        self.take("(")
        values = []
        while self.peek() != ")":
            values.append(self.expr(1))
            if self.peek() == ",":
                self.take()
        self.take(")")
        return values

    def aggregation(self, op: str) -> _Value:
        grouping = (self.take()[1], self.label_list()) if self.peek() in ("by", "without") else None
        arguments = self.arguments()
        if grouping is None and self.peek() in ("by", "without"):
            grouping = (self.take()[1], self.label_list())
        inner = arguments[-1].labels
        way, names = grouping or ("by", [])
        self.need(names, inner, f"{op} {way} ({', '.join(names)})")
        if op in _KEEP_ALL:
            return _Value(inner)
        kept = frozenset(names) if way == "by" else None if inner is None else inner - set(names)
        if op == "count_values":
            return _Value(_union(kept, [arguments[0].text or ""]))
        return _Value(kept)

    def call(self, function: str) -> _Value:
        arguments = self.arguments()
        if function in _SCALAR_FUNCTIONS:
            return _Value(frozenset(), is_scalar=True)
        if function == "vector":
            return _Value(frozenset())
        vector = next((a for a in arguments if not a.is_scalar), _Value(frozenset()))
        if function == "histogram_quantile":
            self.need(["le"], vector.labels, "histogram_quantile")
            return _Value(None if vector.labels is None else vector.labels - {"le"})
        if function in ("label_replace", "label_join"):
            texts = [a.text or "" for a in arguments[1:]]
            sources = [texts[2]] if function == "label_replace" else texts[2:]
            self.need([s for s in sources if s], vector.labels, function)
            return _Value(_union(vector.labels, texts[:1]))
        if function in ("absent", "absent_over_time"):
            return _Value(None)
        return vector

"""Bounds declared once, on a value's type: ``emb: Positive = 256``, ``dropout: Rate = 0.0``.

Each type below is an int or float with an interval, or a path that is not empty. The command line registers
them with jsonargparse (:func:`register`), which checks a flag's or a config's value against its type and names the
flag; a dataclass config checks its own fields against theirs (:func:`check_fields`), so a checkpoint's settings are
bounded too. A value stays a plain ``int``, ``float`` or ``str``. For a type checker each is its base type.
"""

from __future__ import annotations

import dataclasses
import math
import os
import re
from datetime import timedelta
from typing import TYPE_CHECKING, Literal, TypeAlias, Union, get_args, get_origin, get_type_hints

MAX_COUNT = 2**24  # a count a setting gives (rows, ids, batches): past anything one machine trains on
MAX_MEMORY = 100_000  # a Transformer-XL memory: each layer keeps (batch, memory, width) hidden states
MAX_DEPTH = 1_000  # blocks: the deepest published transformers have about that many
MAX_SEED = 2**63 - 1  # torch.Generator.manual_seed takes a signed 64-bit number
MAX_RATE = 1e10  # a learning rate or weight decay, at most: past it the float32 update overflows
MAX_SAMPLE = 1_000_000  # characters a sample call writes (about half an hour on 2 CPU cores)
MAX_WORKERS = 64  # DataLoader processes: each is a copy of this one; past the cores they only wait
BOUNDED: list[type] = []
NAME = re.compile(r"[A-Za-z0-9_][A-Za-z0-9_.-]{0,99}")  # a run's name, or a log version: one folder, never a path


class Named(type):
    """A bounded type shows as what it takes (``an integer in [1, 1,000]``), as ``--help`` writes it."""

    def __repr__(cls) -> str:
        return cls.__name__


class Interval(metaclass=Named):
    """An interval's type: ``check`` returns the value as the base type when it lies inside, else refuses."""

    base: type = int
    low: float = -math.inf
    high: float = math.inf
    open_low = open_high = False

    @classmethod
    def check(cls, value):
        if isinstance(value, str):  # a value from the command line, not yet read as YAML
            try:
                value = cls.base(value)
            except ValueError:
                raise ValueError(f"{value[:40]!r} is not {cls.__name__}") from None
        whole = cls.base is not int or (isinstance(value, float) and value.is_integer())
        if isinstance(value, bool) or not isinstance(value, int | float) or not (whole or isinstance(value, int)):
            raise ValueError(f"{'null' if value is None else str(value)[:40]} is not {cls.__name__}")
        if not math.isfinite(value if isinstance(value, float) else 0.0):  # inf or NaN
            raise ValueError(f"{value} is not finite: pass {cls.__name__}")
        below = value <= cls.low if cls.open_low else value < cls.low
        above = value >= cls.high if cls.open_high else value > cls.high
        if below or above:
            raise ValueError(f"{str(value)[:40]} is not {cls.__name__}")
        try:
            return cls.base(value)
        except OverflowError:  # an integer of hundreds of digits, for a float
            raise ValueError(f"{str(value)[:40]} is not {cls.__name__}") from None


def between(base: type, low: float, high: float = math.inf, open_low=False, open_high=False, name="") -> type:
    """The type of a ``base`` number in an interval, named as a reader writes it: ``an integer in [1, 1,000]``."""
    shown = lambda x: "inf" if x == math.inf else f"{x:,}"  # noqa: E731
    kind = "an integer" if base is int else "a number"
    where = f"{'(' if open_low else '['}{shown(low)}, {shown(high)}{')' if open_high or high == math.inf else ']'}"
    name = name or f"{kind} in {where}"
    attrs = dict(base=base, low=low, high=high, open_low=open_low, open_high=open_high)
    BOUNDED.append(cls := type(name, (Interval,), attrs))
    return cls


class _Path(Interval):
    """A file or folder a setting names: any text but an empty one, which would mean the working folder (as an
    unset shell variable gives: ``--out "$OUT"``)."""

    @classmethod
    def check(cls, value):
        if not isinstance(value, str | os.PathLike) or not str(value).strip():  # a Path, where code passes one
            raise ValueError(f"{str(value)[:40]!r} is not a path; pass a file or folder name")
        return value


_Path.__name__ = "a path"
BOUNDED.append(_Path)


class _Time(Interval):
    """A span of time as Lightning reads one: ``DD:HH:MM:SS``, or timedelta's arguments (``{minutes: 30}``); not
    negative (Lightning's validation every step, or a fit of no step)."""

    @classmethod
    def check(cls, value):
        parts = value.split(":") if isinstance(value, str) else []
        try:
            if not isinstance(value, dict) and (len(parts) != 4 or not all(part.strip().isdecimal() for part in parts)):
                raise ValueError
            if timespan(value) < timedelta(0):
                raise ValueError
        except (TypeError, ValueError, OverflowError):
            raise ValueError(f"{str(value)[:40]!r} is not {cls.__name__}") from None
        return value


def timespan(time):
    """A :data:`Time` as a timedelta (None stays None)."""
    if time is None or isinstance(time, timedelta):
        return time
    if isinstance(time, dict):
        return timedelta(**time)
    days, hours, minutes, seconds = map(int, time.split(":"))
    return timedelta(days=days, hours=hours, minutes=minutes, seconds=seconds)


_Time.__name__ = "a time of at least 0 (DD:HH:MM:SS, or a mapping of timedelta's arguments)"
BOUNDED.append(_Time)


class _Name(Interval):
    """A run's name: one folder of logs/ and of checkpoints/, never a path."""

    @classmethod
    def check(cls, value):
        text = str(value) if isinstance(value, int) and not isinstance(value, bool) else value  # name: 2026
        if not isinstance(text, str) or not NAME.fullmatch(text):
            shown = str(text) if len(str(text)) <= 60 else f"{str(text)[:40]}..."
            raise ValueError(f"{shown!r} is not {cls.__name__}")
        return text


_Name.__name__ = ("a folder name (up to 100 ASCII letters, digits, '_', '-' and '.', not '-' or '.' first, e.g. "
                  "shakespeare_2)")  # fmt: skip
BOUNDED.append(_Name)


if TYPE_CHECKING:
    RunName: TypeAlias = str
    PathName: TypeAlias = str
    Time: TypeAlias = str | dict[str, int]
    Positive: TypeAlias = int
    Count: TypeAlias = int
    Classes: TypeAlias = int
    Depth: TypeAlias = int
    NonNegative: TypeAlias = int
    Memory: TypeAlias = int
    Seed: TypeAlias = int
    GlobalSeed: TypeAlias = int
    Length: TypeAlias = int
    Samples: TypeAlias = int
    Pictured: TypeAlias = int
    Dpi: TypeAlias = int
    SampleLength: TypeAlias = int
    Rate: TypeAlias = float
    Unit: TypeAlias = float
    LearningRate: TypeAlias = float
    OpenRate: TypeAlias = float
    Share: TypeAlias = float
    PositiveFloat: TypeAlias = float
    NonNegativeFloat: TypeAlias = float
    Base: TypeAlias = float
    Workers: TypeAlias = int
    TopK: TypeAlias = int
    Digits: TypeAlias = int
    HeldOut: TypeAlias = int
else:
    RunName = _Name
    PathName = _Path
    Time = _Time
    Positive = between(int, 1, name="a positive integer")
    Count = between(int, 1, MAX_COUNT)
    Classes = between(int, 2, MAX_COUNT)
    Depth = between(int, 1, MAX_DEPTH)
    NonNegative = between(int, 0, name="a non-negative integer")
    Memory = between(int, 0, MAX_MEMORY)
    Seed = between(int, 0, MAX_SEED)
    GlobalSeed = between(int, 0, 2**32 - 1)  # Lightning's seed_everything seeds numpy too, which takes these
    Length = between(int, 1, MAX_SAMPLE)  # characters to sample
    Samples = between(int, 1, 1_000)  # samples of one prompt
    Pictured = between(int, 1, 256)  # tokens an attention panel holds
    SampleLength = between(int, 0, 100_000)  # a sample after each validation: a minute or so on a CPU; 0: none
    Dpi = between(int, 20, 1_200)  # FreeType refused the labels' size at 4; past 1,200 matplotlib's C ints overflow
    Rate = between(float, 0.0, 1.0, open_high=True)  # dropout, label smoothing, a momentum: [0, 1)
    Unit = between(float, 0.0, 1.0)  # a fraction
    LearningRate = between(float, 0.0, MAX_RATE)  # 0 holds the weights (a check that nothing else moves them)
    OpenRate = between(float, 0.0, 1.0, open_low=True, open_high=True)  # a masking probability: (0, 1)
    Share = between(float, 0.0, 1.0, open_low=True)  # top-p's mass: (0, 1]
    PositiveFloat = between(float, 0.0, open_low=True, name="a positive number")
    NonNegativeFloat = between(float, 0.0, name="a non-negative number")
    Workers = between(int, 0, MAX_WORKERS)
    TopK = between(int, -1, MAX_COUNT)  # checkpoints kept by their score: -1 every one, 0 none
    Digits = between(int, 1, 4_096)  # a generated task's numbers: Python writes an int of at most 4,300 digits
    HeldOut = between(int, 1, 100_000)  # distinct held-out examples a task draws: about 10 s each 100,000
    Base = between(float, 1.0, open_low=True)  # RoPE's: the longest wavelength grows with it; at 1 or below none does


for _name, _type in list(globals().items()):  # pickled by name: ddp_spawn sends the settings to its processes
    if isinstance(_type, type) and issubclass(_type, Interval):
        _type.__qualname__ = _name


def is_count(value, high: float = math.inf) -> bool:
    """A whole number in [0, high], and not a bool: what a count read from a file must be."""
    return isinstance(value, int) and not isinstance(value, bool) and 0 <= value <= high


def checked(hint, value, where: str):
    """``value`` against its annotation's interval type (``Positive``, ``Positive | None``), choices
    (``Literal[...]``) or plain type (``bool``): as its base type, or None where the annotation admits None; a
    refusal names ``where``. Other annotations (a settings class, read from a mapping later) pass it as is."""
    args = get_args(hint) if get_origin(hint) in (Union, type(int | None)) else (hint,)
    choices = [c for a in args if get_origin(a) is Literal for c in get_args(a)]
    bounded = [a for a in args if isinstance(a, type) and issubclass(a, Interval)]  # Count | Share | Time: each
    others = [a for a in args if isinstance(a, type) and a not in bounded]  # None's type, bool beside choices, ...
    plain = any(a in (bool, int, float, str) for a in others)  # a file's "yes" is no bool, though truthy
    if (not choices and not bounded and not plain) or value in choices or any(isinstance(value, a) for a in others):
        return value
    shown = "null" if value is None else repr(str(value)[:40])
    if not bounded:
        kinds = [*map(str, choices), *(PLAIN.get(a, a.__name__) for a in others)]
        raise ValueError(f"{where}={shown} is not one of {'|'.join(kinds)}")
    refusals = []
    for cls in bounded:
        try:
            return cls.check(value)
        except ValueError as e:
            refusals.append(e)
    if len(bounded) == 1:
        raise ValueError(f"{where}={refusals[0]}")
    raise ValueError(f"{where}={shown} is none of: {'; '.join(cls.__name__ for cls in bounded)}")


PLAIN = {bool: "true|false", type(None): "null"}  # how a refusal names a plain type


def not_finite(state: dict) -> list[str]:
    """The names of a state dict's floating-point tensors that hold NaN or inf."""
    import torch

    return [k for k, t in state.items() if torch.is_tensor(t) and t.is_floating_point() and not t.isfinite().all()]


def refuse_unusable(state: dict, source: str, error: type[ValueError] = ValueError) -> None:
    """Weights of integers (a load cuts each to a whole number) or of NaN or inf: fit saves neither, none can use it."""
    if ints := [k for k, t in state.items() if hasattr(t, "is_floating_point") and not t.is_floating_point()]:
        raise error(f"{source} holds {str(ints[0])[:60]!r} as {state[ints[0]].dtype}, not as weights (floats): a "
                    "damaged model; pass another file")  # fmt: skip
    if bad := not_finite(state):
        raise error(f"{source} holds weights that are not finite ({str(bad[0])[:60]!r}: NaN or inf): a diverged or "
                    "damaged model; pass another file")  # fmt: skip


def check_fields(config, where: str = "model ") -> None:
    """A dataclass's fields against their annotations, in place (a frozen one's too): a refusal names
    ``where`` + the field."""
    hints = get_type_hints(type(config))
    for field in dataclasses.fields(config):
        value = checked(hints[field.name], getattr(config, field.name), where + field.name)
        object.__setattr__(config, field.name, value)


def check_args(function, values, where: str = "model") -> None:
    """A function's arguments (``values``, a mapping) against their parameters' interval types: for an object
    built from settings read from disk, such as a Lightning module from a checkpoint's hyper-parameters."""
    hints = get_type_hints(function)
    for name, value in values.items():
        if name in hints:
            checked(hints[name], value, f"{where}.{name}")


def register() -> None:
    """Teach jsonargparse the interval types: it checks a value against its type, and names the flag."""
    from jsonargparse.typing import register_type

    for cls in BOUNDED:
        register_type(cls, serializer=lambda v: v, deserializer=cls.check)  # type: ignore[attr-defined]

"""Numbers, dates, times, units, currency and symbols as words, in Chinese and in English.

ChatTTS reads only words: the official normalizer deletes every digit it finds
(``"2024年3月5日"`` becomes ``"年月日"``) unless an optional package is installed.
Here digits always become words: Chinese with ``cn2an`` after our own rules for
the cases it gets wrong (ISO dates, clock times, ranges, versions, units,
phone-like numbers), English with ``inflect``. Which language a stretch of text
is read in is :mod:`turbotts.text.normalize`'s decision, not this module's.
Pure ``str -> str``: no torch, no I/O.
"""

from __future__ import annotations

import logging
import re
import warnings
from collections.abc import Callable
from functools import cache
from typing import Any, Literal

import cn2an

from turbotts.redaction import describe_text
from turbotts.text.inflect_engine import number_to_words_engine

logger = logging.getLogger(__name__)

# cn2an reports a digit it cannot read (Arabic-Indic and other non-ASCII digits) with
# warnings.warn quoting it, straight to stderr beside the JSON log lines; we read such
# digits one by one anyway, and log only a digest when cn2an fails outright.
warnings.filterwarnings("ignore", category=UserWarning, module=r"cn2an(\.|$)")

Lang = Literal["zh", "en"]
Rule = tuple["re.Pattern[str]", Callable[["re.Match[str]"], str]]
_NUM = r"\d+(?:\.\d+)?"

_ZH_DIGITS = "零一二三四五六七八九"
_ZH_UNITS = {
    "km/h": "千米每小时", "m/s": "米每秒", "km": "千米", "cm": "厘米", "mm": "毫米", "m": "米",
    "kg": "千克", "mg": "毫克", "g": "克", "ml": "毫升", "mL": "毫升", "L": "升",
    "ms": "毫秒", "min": "分钟", "h": "小时", "s": "秒", "kHz": "千赫兹", "GHz": "吉赫兹",
    "Hz": "赫兹", "kW": "千瓦", "W": "瓦", "mAh": "毫安时", "V": "伏",
}  # fmt: skip
_EN_UNITS = {
    "km/h": "kilometers per hour", "m/s": "meters per second", "mph": "miles per hour",
    "km": "kilometers", "cm": "centimeters", "mm": "millimeters", "m": "meters",
    "kg": "kilograms", "mg": "milligrams", "g": "grams", "lb": "pounds", "lbs": "pounds",
    "ml": "milliliters", "mL": "milliliters", "L": "liters", "ms": "milliseconds",
    "min": "minutes", "h": "hours", "kHz": "kilohertz", "GHz": "gigahertz", "Hz": "hertz",
    "KB": "kilobytes", "MB": "megabytes", "GB": "gigabytes", "TB": "terabytes",
    "kW": "kilowatts", "W": "watts", "mAh": "milliamp hours", "V": "volts",
}  # fmt: skip
_ZH_MONEY = {"$": "美元", "¥": "元", "￥": "元", "€": "欧元", "£": "英镑"}
_EN_MONEY = {"$": ("dollar", "cent"), "€": ("euro", "cent"), "£": ("pound", "penny"), "¥": ("yuan", "")}
_EN_SYMBOLS = {"&": " and ", "+": " plus ", "=": " equals ", "@": " at ", "#": " number "}
_ZH_SYMBOLS = {"+": "加", "=": "等于", "&": "和", "×": "乘", "÷": "除以"}
_DEG = {"C": "Celsius", "F": "Fahrenheit"}
_MONTHS = (
    "January", "February", "March", "April", "May", "June",
    "July", "August", "September", "October", "November", "December",
)  # fmt: skip


def _unit_re(units: dict[str, str]) -> re.Pattern[str]:
    names = "|".join(re.escape(u) for u in sorted(units, key=len, reverse=True))
    return re.compile(rf"({_NUM})\s*({names})(?![A-Za-z])")


#: a number and a unit Chinese reads (``100kg``): the normalizer reads a run of only these in Chinese
ZH_UNIT_RE = _unit_re(_ZH_UNITS)
_EN_UNIT_RE = _unit_re(_EN_UNITS)
_THOUSANDS_RE = re.compile(r"(?<=\d),(?=\d{3}(?!\d))")


# ---------------------------------------------------------------- Chinese


def _zh_int(digits: str) -> str:
    """An integer the way it is said; phone-like strings digit by digit."""
    if len(digits) >= 11 or (len(digits) > 1 and digits[0] == "0"):
        return "".join(_ZH_DIGITS[int(d)] for d in digits)
    return str(cn2an.an2cn(digits))


def _zh_num(num: str) -> str:
    whole, _, frac = num.partition(".")
    out = _zh_int(whole)
    return out + "点" + "".join(_ZH_DIGITS[int(d)] for d in frac) if frac else out


def _zh_time(m: re.Match[str]) -> str:
    hour, minute, second = int(m[1]), int(m[2]), m[3]
    if hour > 24 or minute > 59:
        return m[0]
    out = _zh_int(str(hour)) + "点"
    if minute or second:
        out += ("零" if minute < 10 else "") + _zh_int(str(minute)) + "分"
    if second:
        out += _zh_int(str(int(second))) + "秒"
    return out


_ZH_RULES: list[Rule] = [
    (re.compile(r"(\d{4})[-/.](\d{1,2})[-/.](\d{1,2})(?!\d)"), lambda m: f"{m[1]}年{int(m[2])}月{int(m[3])}日"),
    (re.compile(r"(\d{1,2}):(\d{2})(?::(\d{2}))?(?!\d)"), _zh_time),
    (re.compile(rf"(-?{_NUM})\s*(?:℃|°C)"), lambda m: _zh_signed(m[1]) + "摄氏度"),
    (re.compile(rf"(-?{_NUM})\s*°F"), lambda m: "华氏" + _zh_signed(m[1]) + "度"),
    (re.compile(rf"([$¥￥€£])\s*({_NUM})"), lambda m: _zh_num(m[2]) + _ZH_MONEY[m[1]]),
    (re.compile(r"\d+(?:\.\d+){2,}"), lambda m: "点".join(_zh_int(p) for p in m[0].split("."))),
    (ZH_UNIT_RE, lambda m: _zh_num(m[1]) + _ZH_UNITS[m[2]]),
    (re.compile(rf"({_NUM})\s*[-~～—–]\s*(?={_NUM})"), lambda m: m[1] + "到"),
    (re.compile(r"(?<![\d.])(?:\d{11,}|0\d+)"), lambda m: _zh_int(m[0])),
]


def _zh_signed(num: str) -> str:
    return "零下" + _zh_num(num[1:]) if num.startswith("-") else _zh_num(num)


def normalize_zh(text: str) -> str:
    """Read the digits and symbols of Chinese text in Chinese.

    When cn2an cannot read a number (``cn2an.an2cn`` raises on non-ASCII digits such
    as ``"¥١٢٣"``), the digits are read one by one; the warning gives a digest of
    the text, never the text (nor cn2an's message, which quotes it).
    """
    try:
        return _zh_spelled(text)
    except (ValueError, KeyError, IndexError) as exc:  # cn2an raises these on odd input
        logger.warning(
            "cn2an could not read %s (%s); reading digits one by one", describe_text(text), type(exc).__name__
        )
    text = "".join(_ZH_SYMBOLS.get(ch, ch) for ch in _THOUSANDS_RE.sub("", text))
    return re.sub(r"\d", lambda m: _ZH_DIGITS[int(m[0])], text)


def _zh_spelled(text: str) -> str:
    text = _THOUSANDS_RE.sub("", text)
    for pattern, fn in _ZH_RULES:
        text = pattern.sub(fn, text)
    text = "".join(_ZH_SYMBOLS.get(ch, ch) for ch in text)
    text = cn2an.transform(text, "an2cn")
    return re.sub(r"\d", lambda m: _ZH_DIGITS[int(m[0])], text)


# ---------------------------------------------------------------- English


@cache
def _inflect() -> Any:
    return number_to_words_engine()


def _en_int(digits: str) -> str:
    if len(digits) >= 10 or (len(digits) > 1 and digits[0] == "0"):
        return " ".join(str(_inflect().number_to_words(d)) for d in digits)
    words = str(_inflect().number_to_words(str(int(digits)), andword=""))
    return words.replace(",", "").replace("-", " ")


def _en_num(num: str) -> str:
    whole, _, frac = num.partition(".")
    out = _en_int(whole or "0")
    return out + " point " + " ".join(_en_int(d) for d in frac) if frac else out


def _en_year(digits: str) -> str:
    year = int(digits)
    hi, lo = divmod(year, 100)
    if 2000 <= year < 2010 or (lo == 0 and hi % 10 == 0):
        return _en_int(digits)
    if lo == 0:
        return f"{_en_int(str(hi))} hundred"
    return f"{_en_int(str(hi))} {'oh ' if lo < 10 else ''}{_en_int(str(lo))}"


def _en_ordinal(digits: str) -> str:
    return str(_inflect().ordinal(_en_int(digits))).replace("-", " ")


def _en_date(m: re.Match[str]) -> str:
    month, day = int(m[2]), int(m[3])
    if not (1 <= month <= 12 and 1 <= day <= 31):
        return m[0]
    return f" {_MONTHS[month - 1]} {_en_ordinal(str(day))}, {_en_year(m[1])} "


def _en_time(m: re.Match[str]) -> str:
    hour, minute = int(m[1]), int(m[2])
    if hour > 24 or minute > 59:
        return m[0]
    suffix = f" {m[4][0].lower()} m" if m[4] else ""
    if minute == 0:
        return f" {_en_int(str(hour))}{suffix or ' o clock'} "
    return f" {_en_int(str(hour))} {'oh ' if minute < 10 else ''}{_en_int(str(minute))}{suffix} "


def _en_money(m: re.Match[str]) -> str:
    unit, sub = _EN_MONEY[m[1]]
    whole, _, frac = m[2].partition(".")
    if m[3]:
        return f" {_en_num(m[2])} {m[3].strip()} {unit}s "
    out = f"{_en_int(whole)} {_inflect().plural(unit, int(whole))}"
    if frac and sub and int(frac[:2].ljust(2, "0")):
        cents = str(int(frac[:2].ljust(2, "0")))
        out += f" and {_en_int(cents)} {_inflect().plural(sub, int(cents))}"
    return f" {out} "


_EN_RULES: list[Rule] = [
    (re.compile(r"(\d{4})-(\d{1,2})-(\d{1,2})(?!\d)"), _en_date),
    (re.compile(r"(\d{1,2}):(\d{2})(?::(\d{2}))?(?!\d)(?:\s*([AaPp])\.?[Mm]\b\.?)?"), _en_time),
    (re.compile(r"\b(\d{1,2})\s*([AaPp])\.?[Mm]\b\.?"), lambda m: f" {_en_int(m[1])} {m[2].lower()} m "),
    (re.compile(rf"([$€£¥])\s*({_NUM})(\s*(?:thousand|million|billion|trillion)\b)?"), _en_money),
    (re.compile(rf"({_NUM})\s*%"), lambda m: f" {_en_num(m[1])} percent "),
    (re.compile(rf"(-?{_NUM})\s*°\s*([CF])\b"), lambda m: f" {_en_signed(m[1])} degrees {_DEG[m[2]]} "),
    (re.compile(r"(\d+)(?:st|nd|rd|th)\b"), lambda m: f" {_en_ordinal(m[1])} "),
    (re.compile(r"\b[vV](\d+(?:\.\d+)+)\b"), lambda m: f" version {_en_dotted(m[1])} "),
    (re.compile(r"\d+(?:\.\d+){2,}"), lambda m: f" {_en_dotted(m[0])} "),
    (_EN_UNIT_RE, lambda m: f" {_en_num(m[1])} {_EN_UNITS[m[2]]} "),
    (re.compile(rf"({_NUM})\s*[-~–]\s*(?={_NUM})"), lambda m: f"{m[1]} to "),
    (re.compile(rf"(?<![\w.])-({_NUM})"), lambda m: f" minus {_en_num(m[1])} "),
    (re.compile(r"\d+\.\d+"), lambda m: f" {_en_num(m[0])} "),
    (re.compile(r"(?<![\d.])(1[1-9]\d\d|20\d\d)(?![\d.])"), lambda m: f" {_en_year(m[0])} "),
    (re.compile(r"\d+"), lambda m: f" {_en_int(m[0])} "),
]


def _en_signed(num: str) -> str:
    return "minus " + _en_num(num[1:]) if num.startswith("-") else _en_num(num)


def _en_dotted(num: str) -> str:
    return " point ".join(_en_int(p) for p in num.split("."))


def normalize_en(text: str) -> str:
    """Read the digits and symbols of English text in English."""
    text = _THOUSANDS_RE.sub("", text)
    for pattern, fn in _EN_RULES:
        text = pattern.sub(fn, text)
    text = "".join(_EN_SYMBOLS.get(ch, ch) for ch in text)
    return re.sub(r" {2,}", " ", text)


def say_number(num: str, lang: Lang) -> str:
    """A signed decimal (``-12.5``, ASCII digits) as a cardinal, as SSML ``say-as cardinal`` asks."""
    return _zh_signed(num) if lang == "zh" else _en_signed(num)


def say_digit(digit: str, lang: Lang) -> str:
    """One ASCII digit as its word (``say-as digits`` and ``telephone``)."""
    return _ZH_DIGITS[int(digit)] if lang == "zh" else _en_int(digit)

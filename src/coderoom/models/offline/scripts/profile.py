"""Profile a CSV: delimiter, columns, types, missing values, the time column and its step, gaps.

Sent into the sandbox by coderoom's offline analyst and run there:
    python .coderoom/profile.py input/data.csv
Prints a readable profile, then one line `CODEROOM_PROFILE {json}` that the analyst reads to plan
the next step (which columns to analyse, how to parse them). Nothing is assumed about column names
or formats: the delimiter is sniffed, the time column is the one that parses as dates, and the
target is chosen from the numeric columns by name hints.
"""

from __future__ import annotations

import csv
import json
import re
import sys
import warnings

import numpy as np
import pandas as pd

MARK = "CODEROOM_PROFILE"
# pandas 1.x (Debian 12's, e.g. in a docker sandbox image built from Debian) has no format="mixed";
# without a format it already parses each value on its own.
MIXED_FORMAT = {"format": "mixed"} if int(pd.__version__.split(".")[0]) >= 2 else {}
TARGET_HINTS = ("energy", "kwh", "load", "power", "consumption", "demand", "usage", "value", "kw")
TEMP_HINTS = ("temp", "oat", "drybulb", "dry_bulb")
TIME_HINTS = ("time", "date", "stamp", "datetime", "ts", "hour", "period")


def sniff(path: str) -> tuple[str, str]:
    """(delimiter, decimal) from the first 64 KB of the file."""
    with open(path, newline="", encoding="utf-8", errors="replace") as fh:
        sample = fh.read(65536)
    try:
        sep = csv.Sniffer().sniff(sample, delimiters=",;\t|").delimiter
    except csv.Error:
        sep = ","
    decimal = "," if sep != "," and re.search(r"\d,\d", sample) else "."
    return sep, decimal


def time_score(parsed: pd.Series) -> tuple[float, float]:
    """(share parsed, share of steps equal to the usual step): how convincing a time parse is."""
    ok = parsed.notna().mean()
    steps = parsed.dropna().diff().dropna()
    regular = (steps == steps.median()).mean() if len(steps) else 0.0
    return float(ok), float(regular)


def parse_time(col: pd.Series) -> tuple[pd.Series | None, dict]:
    """Parse one column as timestamps; None when it does not look like time."""
    name = str(col.name).lower()
    if pd.api.types.is_numeric_dtype(col):
        if not any(h in name for h in TIME_HINTS + ("epoch", "unix")):
            return None, {}
        v = col.dropna()
        for unit, lo, hi in (("s", 1e8, 4e9), ("ms", 1e11, 4e12)):
            if len(v) and v.between(lo, hi).all():
                return pd.to_datetime(col, unit=unit, errors="coerce"), {"unit": unit}
        return None, {}
    text = col.astype("string").str.strip()
    if text.dropna().str.fullmatch(r"[-+]?\d+(\.\d+)?").mean() > 0.5:
        return None, {}
    best, best_opts, best_score = None, {}, (0.0, 0.0)
    for dayfirst in (False, True):
        with warnings.catch_warnings():
            warnings.simplefilter("ignore")
            parsed = pd.to_datetime(text, errors="coerce", dayfirst=dayfirst, **MIXED_FORMAT)
        if getattr(parsed.dt, "tz", None) is not None:
            parsed = parsed.dt.tz_localize(None)
        score = time_score(parsed)
        if score > best_score:
            best, best_opts, best_score = parsed, {"dayfirst": dayfirst}, score
    if best is None or best_score[0] < 0.9:
        return None, {}
    return best, best_opts


def to_numeric(col: pd.Series) -> pd.Series | None:
    """The column as floats if most non-empty cells are numbers (handles stray text like 'NA')."""
    if pd.api.types.is_numeric_dtype(col):
        return col.astype(float)
    if pd.api.types.is_bool_dtype(col):
        return None
    num = pd.to_numeric(col.astype("string").str.strip(), errors="coerce")
    filled = col.notna() & (col.astype("string").str.strip() != "")
    if filled.sum() and num[filled].notna().mean() >= 0.9:
        return num.astype(float)
    return None


def pick_target(numeric: list[str], temp: str | None) -> str | None:
    """Prefer names that say energy/load/power; else the first numeric non-temperature column."""
    candidates = [c for c in numeric if c != temp]
    for hint in TARGET_HINTS:
        for c in candidates:
            if hint in c.lower():
                return c
    return candidates[0] if candidates else None


def pick_temperature(numeric: list[str]) -> str | None:
    for c in numeric:
        low = c.lower()
        if any(h in low for h in TEMP_HINTS) and "setpoint" not in low:
            return c
    return None


def temperature_unit(name: str) -> str:
    low = name.lower()
    return "F" if re.search(r"(^|_|\b)(f|degf|fahrenheit)($|_|\b)", low) or "fahrenheit" in low else "C"


def step_text(seconds: float) -> str:
    if seconds % 86400 == 0:
        return f"{int(seconds // 86400)} day(s)"
    if seconds % 3600 == 0:
        return f"{int(seconds // 3600)} hour(s)"
    if seconds % 60 == 0:
        return f"{int(seconds // 60)} minute(s)"
    return f"{seconds:g} second(s)"


def profile(path: str) -> dict:
    sep, decimal = sniff(path)
    df = pd.read_csv(path, sep=sep, decimal=decimal, skipinitialspace=True)
    df.columns = [str(c).strip() for c in df.columns]
    info: dict = {
        "path": path,
        "sep": sep,
        "decimal": decimal,
        "rows": len(df),
        "columns": list(df.columns),
        "dtypes": {c: str(t) for c, t in df.dtypes.items()},
        "missing": {c: int(n) for c, n in df.isna().sum().items()},
    }
    time_col, parsed, time_opts = None, None, {}
    ordered = sorted(df.columns, key=lambda c: not any(h in c.lower() for h in TIME_HINTS))
    for c in ordered:
        p, opts = parse_time(df[c])
        if p is not None:
            time_col, parsed, time_opts = c, p, opts
            break
    numeric = [c for c in df.columns if c != time_col and to_numeric(df[c]) is not None]
    temp = pick_temperature(numeric)
    target = pick_target(numeric, temp)
    info.update(
        time_col=time_col,
        time_options=time_opts,
        numeric=numeric,
        target=target,
        temperature=temp,
        temperature_unit=temperature_unit(temp) if temp else None,
    )
    if parsed is not None:
        t = parsed.dropna().sort_values()
        steps = t.diff().dropna().dt.total_seconds()
        step = float(steps.median()) if len(steps) else None
        info.update(
            start=str(t.iloc[0]) if len(t) else None,
            end=str(t.iloc[-1]) if len(t) else None,
            unparsed_times=int(parsed.isna().sum()),
            duplicate_times=int(t.duplicated().sum()),
            step_seconds=step,
            sorted=bool(parsed.dropna().is_monotonic_increasing),
        )
        if step:
            big = steps[steps > 1.5 * step]
            info["gaps"] = [
                {"after": str(t.iloc[i]), "missing_steps": int(round(s / step)) - 1}
                for i, s in zip(np.flatnonzero(steps.values > 1.5 * step), big)
            ][:20]
            info["gap_count"] = len(big)
            info["missing_steps"] = int(sum(round(s / step) - 1 for s in big))
    if target:
        v = to_numeric(df[target])
        info["target_stats"] = {
            k: round(float(x), 3)
            for k, x in v.describe()[["mean", "std", "min", "50%", "max"]].items()
        }
        info["target_zero_or_negative"] = int((v <= 0).sum())
    if temp:
        v = to_numeric(df[temp])
        info["temperature_range"] = [round(float(v.min()), 1), round(float(v.max()), 1)]
    return info


def show(info: dict) -> None:
    print(f"file: {info['path']}  (delimiter {info['sep']!r}, decimal {info['decimal']!r})")
    print(f"rows: {info['rows']}  columns: {len(info['columns'])}")
    for c in info["columns"]:
        print(f"  {c:<28} {info['dtypes'][c]:<10} missing={info['missing'][c]}")
    if info["time_col"] is None:
        print("time column: none found (no column parses as dates/times)")
        return
    print(f"time column: {info['time_col']}  from {info['start']} to {info['end']}")
    if info.get("step_seconds"):
        print(f"usual step: {step_text(info['step_seconds'])}; gaps: {info['gap_count']} "
              f"({info['missing_steps']} missing steps); duplicates: {info['duplicate_times']}")
    print(f"target: {info['target']}  temperature: {info['temperature']}")
    if info.get("target_stats"):
        print(f"target stats: {info['target_stats']}")


if __name__ == "__main__":
    if len(sys.argv) != 2:
        sys.exit("usage: profile.py CSV")
    result = profile(sys.argv[1])
    show(result)
    print(MARK + " " + json.dumps(result, sort_keys=True))

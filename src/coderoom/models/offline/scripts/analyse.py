"""Find abnormal events in a time series against a weather-aware weekly baseline; write the outputs.

Sent into the sandbox by coderoom's offline analyst and run there:
    python .coderoom/analyse.py .coderoom/analyse.json
The JSON config says how to read the CSV (from the profile step) and which outputs to write
(by extension: .csv events table, .png/.svg/.pdf plot, .md/.txt report, .json events).
Prints a summary and one line `CODEROOM_RESULT {json}` for the analyst to read back.

Method, in the words the report uses:
1. expected value = the median of the same hour of the week in the surrounding weeks (a rolling
   window, so seasonal change is followed), plus a correction for outdoor temperature: how much
   colder or hotter than usual it is for that hour, in heating and cooling degrees, times
   coefficients fitted by robust (Huber) regression, larger in working hours than outside them;
2. residual = observed - expected; robust z = (residual - median) / (1.4826 * MAD), per hour of
   day and weekday/weekend, because working hours are noisier than nights;
3. flagged hours: |z| >= z_on starts a run that lasts while |z| >= z_off (hysteresis); a
   day-long rolling median of z catches slow drifts and level shifts that no single hour shows;
4. events: flagged hours in a row (short gaps bridged); short or small ones are dropped as noise.
"""

from __future__ import annotations

import json
import sys
import unicodedata
import warnings
from pathlib import Path

import numpy as np
import pandas as pd

MARK = "CODEROOM_RESULT"
# pandas 1.x (Debian 12's, e.g. in a docker sandbox image built from Debian) has no format="mixed";
# without a format it already parses each value on its own.
MIXED_FORMAT = {"format": "mixed"} if int(pd.__version__.split(".")[0]) >= 2 else {}
DEFAULTS = {
    "window_periods": 4,  # rolling baseline: this many weeks (or days) either side
    "refine_passes": 1,  # refits of the baseline with flagged hours left out
    "z_on": 6.0,  # an hour this far from expected starts an event
    "z_off": 2.5,  # ... which continues while hours stay this far
    "drift_hours": 24,  # rolling median window for slow drifts and level shifts
    "drift_on": 2.5,  # median z over that window that marks a drift
    "drift_off": 1.5,
    "max_gap_hours": 2,  # flagged runs this close (same direction) form one event
    "min_hours": 2,  # shorter events need |z| >= z_single to be kept
    "z_single": 7.0,
    "min_relative": 0.05,  # peak deviation must be at least this share of the typical level
    "heat_bases": [12.0, 14.0, 15.0, 16.0, 18.0],
    "cool_bases": [18.0, 20.0, 22.0, 24.0, 26.0],
}
DAYS = ["Monday", "Tuesday", "Wednesday", "Thursday", "Friday", "Saturday", "Sunday"]


def ascii_text(text: str) -> str:
    """Plain ASCII: accents folded, anything else dropped (the report must be ASCII only)."""
    return unicodedata.normalize("NFKD", text).encode("ascii", "ignore").decode("ascii")


# ---------------------------------------------------------------- loading


def parse_times(col: pd.Series, options: dict) -> pd.Series:
    if "unit" in options:
        return pd.to_datetime(col, unit=options["unit"], errors="coerce")
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        parsed = pd.to_datetime(
            col.astype("string").str.strip(),
            errors="coerce",
            dayfirst=bool(options.get("dayfirst")),
            **MIXED_FORMAT,
        )
    if getattr(parsed.dt, "tz", None) is not None:
        parsed = parsed.dt.tz_localize(None)
    return parsed


def numeric(col: pd.Series) -> pd.Series:
    if pd.api.types.is_numeric_dtype(col):
        return col.astype(float)
    return pd.to_numeric(col.astype("string").str.strip(), errors="coerce").astype(float)


def load(cfg: dict) -> tuple[pd.DataFrame, dict]:
    """A regular series (index = time) with columns y and, if present, temp; plus notes on cleaning."""
    raw = pd.read_csv(cfg["csv"], sep=cfg.get("sep", ","), decimal=cfg.get("decimal", "."),
                      skipinitialspace=True)
    raw.columns = [str(c).strip() for c in raw.columns]
    t = parse_times(raw[cfg["time_col"]], cfg.get("time_options", {}))
    df = pd.DataFrame({"y": numeric(raw[cfg["target"]]).values}, index=t.values)
    if cfg.get("temperature"):
        df["temp"] = numeric(raw[cfg["temperature"]]).values
    notes = {"rows_read": len(raw), "unparsed_times": int(t.isna().sum())}
    df = df[df.index.notna()].sort_index()
    notes["duplicate_times"] = int(df.index.duplicated().sum())
    df = df.groupby(level=0).mean()
    step = pd.Series(df.index).diff().median()
    step_s = step.total_seconds() if pd.notna(step) else 3600.0
    if step_s < 3600:
        # Sub-hourly: hourly mean, scaled back to an hourly total for energy-like quantities.
        per_hour = 3600.0 / step_s
        agg = df.resample("1h").mean()
        if cfg.get("target_is_energy", True):
            agg["y"] = agg["y"] * per_hour
        df, freq = agg, "1h"
        notes["resampled_to"] = "1 hour"
    elif step_s >= 86400:
        freq = "1D"
        df = df.resample(freq).mean()
    else:
        freq = f"{int(round(step_s / 3600))}h"
        df = df.resample(freq).mean()
    full = pd.date_range(df.index[0], df.index[-1], freq=freq)
    notes["missing_values"] = int(df["y"].reindex(full).isna().sum())
    df = df.reindex(full)
    df.index.name = "time"
    notes["freq"] = freq
    return df, notes


# ---------------------------------------------------------------- baseline


def period_layout(index: pd.DatetimeIndex) -> tuple[int, np.ndarray, str]:
    """(samples per period, key of each sample, period name): weekly when there is enough data."""
    step_h = (index[1] - index[0]).total_seconds() / 3600.0
    days = (index[-1] - index[0]).total_seconds() / 86400.0
    if step_h >= 24:
        return 7, index.day_of_week.values, "week"
    per_day = int(round(24 / step_h))
    slot = (index.hour.values // int(step_h)).astype(int)
    if days >= 21:
        return 7 * per_day, index.day_of_week.values * per_day + slot, "week"
    return per_day, slot, "day"


def rolling_same_key(values: np.ndarray, key: np.ndarray, period: int, half: int) -> np.ndarray:
    """Median of the same key (e.g. hour of week) in the `half` periods either side.

    The sample itself is left out: otherwise, under a seasonal trend, the median of a monotone
    window is the sample itself and its residual is zero by construction.
    """
    first = int(key[0])
    padded = np.concatenate([np.full(first, np.nan), values])
    n_periods = int(np.ceil(padded.size / period))
    padded = np.concatenate([padded, np.full(n_periods * period - padded.size, np.nan)])
    grid = padded.reshape(n_periods, period)
    stack = np.full((2 * half, n_periods, period), np.nan)
    for i, k in enumerate([k for k in range(-half, half + 1) if k != 0]):
        if k < 0:
            stack[i, -k:] = grid[:k]
        else:
            stack[i, :-k] = grid[k:]
    with warnings.catch_warnings():
        warnings.simplefilter("ignore", RuntimeWarning)
        med = np.nanmedian(stack, axis=0)
        enough = np.sum(np.isfinite(stack), axis=0) >= 2
        med = np.where(enough, med, np.nanmedian(grid, axis=0)[None, :])
    return med.reshape(-1)[first:first + values.size]


def huber_fit(x: np.ndarray, y: np.ndarray, c: float = 1.345, iters: int = 30) -> np.ndarray:
    """Robust linear regression (iteratively reweighted least squares with Huber weights)."""
    w = np.ones(y.size)
    beta = np.zeros(x.shape[1])
    for _ in range(iters):
        sw = np.sqrt(w)
        beta = np.linalg.lstsq(x * sw[:, None], y * sw, rcond=None)[0]
        r = y - x @ beta
        s = 1.4826 * np.median(np.abs(r - np.median(r))) or 1e-9
        u = np.abs(r) / (c * s)
        w = np.where(u <= 1, 1.0, 1.0 / np.maximum(u, 1e-12))
    return beta


def robust_scale(r: np.ndarray) -> float:
    r = r[np.isfinite(r)]
    return float(1.4826 * np.median(np.abs(r - np.median(r)))) if r.size else float("nan")


def baseline(df: pd.DataFrame, p: dict, mask: np.ndarray | None = None) -> tuple[pd.DataFrame, dict]:
    """Expected value per sample: rolling same-hour-of-week median + temperature correction.

    `mask` marks samples already judged abnormal: they are left out of the profile and the fit,
    so recurring faults (say, four weekends of drop-outs) do not drag the baseline with them.
    """
    period, key, period_name = period_layout(df.index)
    y = df["y"].values.copy()
    if mask is not None:
        y[mask] = np.nan
    typical = rolling_same_key(y, key, period, p["window_periods"])
    level = pd.Series(y).groupby(key).median().reindex(range(period)).values
    lo, hi = np.nanpercentile(level, 5), np.nanpercentile(level, 95)
    occ = np.clip((level[key] - lo) / (hi - lo if hi > lo else 1.0), 0, 1)
    out = df.copy()
    out["typical"] = typical
    out["occupancy"] = occ
    info: dict = {"period": period_name, "period_samples": period,
                  "window_periods": p["window_periods"], "temperature_model": None}
    correction = np.zeros(y.size)
    if "temp" in df and df["temp"].notna().sum() > period:
        t = df["temp"].interpolate(limit=6).values
        typical_t = rolling_same_key(t, key, period, p["window_periods"])
        out["typical_temp"] = typical_t
        d = y - typical
        ok = np.isfinite(d) & np.isfinite(t) & np.isfinite(typical_t)
        base_scale = robust_scale(d[ok])
        best = None
        for hb in p["heat_bases"]:
            for cb in p["cool_bases"]:
                if cb <= hb:
                    continue
                hdd = np.clip(hb - t, 0, None) - np.clip(hb - typical_t, 0, None)
                cdd = np.clip(t - cb, 0, None) - np.clip(typical_t - cb, 0, None)
                x = np.column_stack([hdd, cdd, hdd * occ, cdd * occ])
                beta = huber_fit(x[ok], d[ok])
                scale = robust_scale(d[ok] - x[ok] @ beta)
                if best is None or scale < best[0] - 1e-12:
                    best = (scale, hb, cb, beta, x)
        if best is not None and best[0] < 0.99 * base_scale:
            scale, hb, cb, beta, x = best
            correction = np.nan_to_num(x @ beta)
            info["temperature_model"] = {
                "heating_below": hb, "cooling_above": cb,
                "heating_per_degree_off_hours": round(float(beta[0]), 3),
                "cooling_per_degree_off_hours": round(float(beta[1]), 3),
                "heating_per_degree_working_hours": round(float(beta[0] + beta[2]), 3),
                "cooling_per_degree_working_hours": round(float(beta[1] + beta[3]), 3),
                "residual_scale_before": round(base_scale, 3),
                "residual_scale_after": round(scale, 3),
            }
        else:
            info["temperature_note"] = "outdoor temperature did not improve the baseline"
    out["temp_correction"] = correction
    out["expected"] = typical + correction
    return out, info


# ---------------------------------------------------------------- scoring and events


def robust_z(df: pd.DataFrame) -> np.ndarray:
    """Per hour-of-day and weekday/weekend group: (resid - median) / (1.4826 * MAD)."""
    resid = df["y"] - df["expected"]
    group = df.index.hour * 2 + (df.index.day_of_week >= 5)
    overall = robust_scale(resid.values)
    floor = max(0.5 * overall, 1e-6 + 0.002 * float(np.nanmedian(np.abs(df["expected"]))))
    center = resid.groupby(group).transform("median")
    scale = resid.groupby(group).transform(lambda r: robust_scale(r.values)).clip(lower=floor)
    return ((resid - center) / scale).values


def hysteresis(z: np.ndarray, on: float, off: float) -> np.ndarray:
    """+1/-1 where a same-sign run with |z| >= off contains at least one |z| >= on; else 0."""
    flags = np.zeros(z.size, dtype=int)
    zz = np.nan_to_num(z)
    for sign in (1, -1):
        above = sign * zz >= off
        i = 0
        while i < z.size:
            if not above[i]:
                i += 1
                continue
            j = i
            while j < z.size and above[j]:
                j += 1
            if np.any(sign * zz[i:j] >= on):
                flags[i:j] = sign
            i = j
    return flags


def drop_short_runs(flags: np.ndarray, min_len: int) -> np.ndarray:
    """Zero the runs of equal non-zero flags shorter than `min_len`."""
    out = flags.copy()
    i = 0
    while i < out.size:
        j = i
        while j < out.size and out[j] == out[i]:
            j += 1
        if out[i] != 0 and j - i < min_len:
            out[i:j] = 0
        i = j
    return out


def find_events(df: pd.DataFrame, p: dict, hours_per_step: float) -> list[dict]:
    z = df["z"].values
    point = hysteresis(z, p["z_on"], p["z_off"])
    w = max(3, int(round(p["drift_hours"] / hours_per_step)))
    calm = np.where(point == 0, z, np.nan)  # the drift detector must not echo the spikes
    zr = pd.Series(calm).rolling(w, center=True, min_periods=w // 2).median().values
    drift = hysteresis(zr, p["drift_on"], p["drift_off"])
    drift[~np.isfinite(z)] = 0
    drift = drop_short_runs(drift, w)
    flags = np.where(point != 0, point, drift)
    gap = int(round(p["max_gap_hours"] / hours_per_step))
    runs: list[list[int]] = []  # [start, end, sign]
    for i in np.flatnonzero(flags):
        s = int(flags[i])
        if runs and runs[-1][2] == s and i - runs[-1][1] <= gap + 1:
            runs[-1][1] = int(i)
        else:
            runs.append([int(i), int(i), s])
    level = float(np.nanmedian(np.abs(df["expected"])))
    events = []
    for a, b, s in runs:
        seg = df.iloc[a:b + 1]
        zs = seg["z"].abs()
        if zs.isna().all():
            continue
        peak = zs.idxmax()
        dev = float(seg.loc[peak, "y"] - seg.loc[peak, "expected"])
        steps = b - a + 1
        if steps * hours_per_step < p["min_hours"] and zs.max() < p["z_single"]:
            continue
        if abs(dev) < p["min_relative"] * level:
            continue
        from_drift = bool(((point[a:b + 1] == 0) & (drift[a:b + 1] != 0)).mean() > 0.5)
        events.append({"a": a, "b": b, "sign": s, "peak": peak, "peak_dev": dev,
                       "peak_z": float(zs.max()), "drift": from_drift})
    return events


# ---------------------------------------------------------------- describing events


def part_of_day(hour: int) -> str:
    if hour < 6:
        return "night"
    if hour < 12:
        return "morning"
    if hour < 18:
        return "afternoon"
    return "evening"


def easter(year: int) -> pd.Timestamp:
    """Western Easter Sunday (anonymous Gregorian algorithm)."""
    a, b, c = year % 19, year // 100, year % 100
    d, e = divmod(b, 4)
    g = (8 * b + 13) // 25
    h = (19 * a + b - d - g + 15) % 30
    i, k = divmod(c, 4)
    m = (32 + 2 * e + 2 * i - h - k) % 7
    n = (h + m - 7 * ((a + 11 * h + 22 * m) // 451) + 114)
    return pd.Timestamp(year=year, month=n // 31, day=n % 31 + 1)


def holiday_name(day: pd.Timestamp) -> str | None:
    """Widely observed public holidays (no country is known, so only the common ones)."""
    fixed = {(1, 1): "New Year's Day", (5, 1): "May Day / Labour Day", (12, 24): "Christmas Eve",
             (12, 25): "Christmas Day", (12, 26): "Boxing Day / St Stephen's Day",
             (12, 31): "New Year's Eve"}
    if (day.month, day.day) in fixed:
        return fixed[(day.month, day.day)]
    offset = (day.normalize() - easter(day.year)).days
    return {-2: "Good Friday", 1: "Easter Monday", 39: "Ascension Day",
            50: "Whit Monday"}.get(offset)


def when_text(seg: pd.DataFrame, hours: float, hours_per_step: float) -> str:
    start, end = seg.index[0], seg.index[-1]
    text = f"{DAYS[start.day_of_week]} {start:%Y-%m-%d %H:%M}"
    if hours >= 24:
        text += f" to {DAYS[end.day_of_week]} {end:%Y-%m-%d %H:%M} ({hours / 24:.1f} days)"
    elif hours_per_step < 24:
        text += f" to {end:%H:%M}, {part_of_day(start.hour)}"
    weekend = float((seg.index.day_of_week >= 5).mean())
    occ = float(seg["occupancy"].mean())
    if weekend > 0.5:
        text += "; mostly on the weekend"
    elif weekend > 0:
        text += "; includes a weekend"
    if occ < 0.3:
        text += "; outside usual working hours"
    elif occ > 0.6:
        text += "; during usual working hours"
    days = sorted({d.normalize() for d in seg.index})
    names = [f"{d:%Y-%m-%d} is {holiday_name(d)}" for d in days if holiday_name(d)]
    if names:
        text += "; " + ", ".join(names) + " (a public holiday in many countries)"
    return text


def describe(ev: dict, df: pd.DataFrame, info: dict, unit_t: str, hours_per_step: float) -> dict:
    """Numbers and a plausible explanation from timestamps, energy and temperature only."""
    seg = df.iloc[ev["a"]:ev["b"] + 1]
    start, end = seg.index[0], seg.index[-1]
    hours = len(seg) * hours_per_step
    dev = seg["y"] - seg["expected"]
    obs, exp = float(seg["y"].mean()), float(seg["expected"].mean())
    diff = float(dev.sum())
    pct = 100.0 * (obs - exp) / abs(exp) if exp else float("nan")
    high = ev["sign"] > 0
    occ = seg["occupancy"]
    weekend = float((seg.index.day_of_week >= 5).mean())
    off_level = float(df.loc[df["occupancy"] < 0.3, "expected"].median())
    work = seg[(occ > 0.5) & (seg.index.day_of_week < 5)]
    text = []
    near_zero = obs < 0.1 * abs(exp) if exp else False
    if not high and near_zero:
        kind = "dropout"
        text.append("Readings fall to almost zero while the usual level is "
                    f"{exp:.1f}: most likely a meter or data-logger dropout or a supply interruption, "
                    "not a real change in use.")
    elif ev["drift"] and hours >= 24:
        rel = dev / seg["expected"].abs().clip(lower=1e-9) * 100
        quarter = max(1, len(seg) // 4)
        first, last = float(rel.iloc[:quarter].mean()), float(rel.iloc[-quarter:].mean())
        growing = abs(last) > 1.5 * abs(first)
        kind = "drift" if growing else "level shift"
        text.append(f"A sustained {'rise' if high else 'fall'} over {hours / 24:.1f} days: the "
                    f"deviation {'grows from' if growing else 'stays between'} {first:+.0f}% and "
                    f"{last:+.0f}% of the expected level. "
                    + ("A gradual change that ends abruptly points to equipment degrading or a "
                       "control setting drifting, then being reset or repaired."
                       if growing else "A step that holds for days points to a change in "
                       "operation, schedule or equipment, or to a meter change."))
    elif not high and len(work) >= 4 and float(work["y"].mean()) <= 1.3 * off_level:
        kind = "closed day"
        text.append("Working hours on a weekday look like a night or weekend: the building was "
                    "plausibly closed (public holiday, closure day) or its main plant did not start.")
    elif high and (float(occ.mean()) < 0.3 or weekend > 0.5):
        kind = "after-hours high"
        text.append("Consumption is high when the building is normally quiet: plausibly HVAC, "
                    "lighting or equipment left running (schedule or control fault), or unplanned "
                    "out-of-hours activity.")
    elif hours <= 3 * hours_per_step:
        kind = "spike" if high else "dip"
        text.append(f"A short {'spike' if high else 'dip'}: a one-off load, equipment starting or "
                    "stopping, or a data glitch.")
    else:
        kind = "sustained high" if high else "sustained low"
        text.append(f"Use stays {'above' if high else 'below'} the expected level for "
                    f"{hours:.0f} hours.")
    if "temp" in seg and seg["temp"].notna().any():
        t_mean = float(seg["temp"].mean())
        t_typ = float(seg["typical_temp"].mean()) if "typical_temp" in seg else t_mean
        tm = info.get("temperature_model") or {}
        weather = "mild weather"
        if tm and t_mean < tm["heating_below"]:
            weather = "heating weather"
        if tm and t_mean > tm["cooling_above"]:
            weather = "cooling weather"
        corr = float(seg["temp_correction"].sum())
        text.append(f"Outdoor temperature averaged {t_mean:.1f} degrees {unit_t} ({weather}), "
                    f"{abs(t_mean - t_typ):.1f} degrees {unit_t} "
                    f"{'warmer' if t_mean >= t_typ else 'colder'} than usual for these hours"
                    + (f"; the expected value already includes {corr:+.1f} for that, so the "
                       f"remaining {diff:+.1f} is not explained by the weather." if tm else "."))
    return {
        "start": f"{start:%Y-%m-%d %H:%M:%S}",
        "end": f"{end:%Y-%m-%d %H:%M:%S}",
        "hours": round(hours, 2),
        "direction": "high" if high else "low",
        "kind": kind,
        "peak_time": f"{ev['peak']:%Y-%m-%d %H:%M:%S}",
        "peak_deviation": round(ev["peak_dev"], 2),
        "score": round(ev["peak_z"], 2),
        "observed_mean": round(obs, 2),
        "expected_mean": round(exp, 2),
        "deviation_pct": round(pct, 1),
        "total_deviation": round(diff, 2),
        "mean_temp": round(float(seg["temp"].mean()), 1) if "temp" in seg else None,
        "when": when_text(seg, hours, hours_per_step),
        "explanation": " ".join(text),
    }


# ---------------------------------------------------------------- outputs


def write_csv(path: Path, events: list[dict]) -> None:
    cols = ["event_id", "start", "end", "hours", "peak_time", "peak_deviation", "direction",
            "score", "kind", "observed_mean", "expected_mean", "deviation_pct", "total_deviation",
            "mean_temp"]
    rows = [{"event_id": i + 1, **{k: e[k] for k in cols[1:]}} for i, e in enumerate(events)]
    pd.DataFrame(rows, columns=cols).to_csv(path, index=False)


def write_plot(path: Path, df: pd.DataFrame, events: list[dict], cfg: dict) -> None:
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    has_t = "temp" in df and df["temp"].notna().any()
    fig, axes = plt.subplots(2 if has_t else 1, 1, figsize=(15, 7 if has_t else 5), sharex=True,
                             gridspec_kw={"height_ratios": [3, 1]} if has_t else None)
    ax = axes[0] if has_t else axes
    ax.plot(df.index, df["y"], lw=0.6, color="#333333", label=f"observed {cfg['target']}")
    ax.plot(df.index, df["expected"], lw=0.8, color="#1f77b4", alpha=0.8,
            label="expected (weekly profile + weather)")
    for i, e in enumerate(events):
        color = "#d62728" if e["direction"] == "high" else "#9467bd"
        for a in axes if has_t else [ax]:
            a.axvspan(pd.Timestamp(e["start"]), pd.Timestamp(e["end"]) + pd.Timedelta(hours=1),
                      color=color, alpha=0.25, lw=0)
        ax.annotate(str(i + 1), (pd.Timestamp(e["peak_time"]), ax.get_ylim()[1]),
                    ha="center", va="top", fontsize=8, color=color)
    ax.set_ylabel(ascii_text(cfg["target"]))
    ax.set_title(ascii_text(f"{cfg['target']}: {len(events)} abnormal event(s) highlighted "
                            "(red = higher than expected, purple = lower)"))
    ax.legend(loc="upper left", fontsize=8)
    if has_t:
        axes[1].plot(df.index, df["temp"], lw=0.6, color="#ff7f0e")
        axes[1].set_ylabel(f"outdoor temp (degrees {cfg.get('temperature_unit') or 'C'})")
    fig.tight_layout()
    fig.savefig(path, dpi=110, metadata={"Software": None} if path.suffix == ".png" else None)
    plt.close(fig)


def write_report(path: Path, df: pd.DataFrame, events: list[dict], cfg: dict, notes: dict,
                 info: dict, p: dict) -> None:
    unit_t = cfg.get("temperature_unit") or "C"
    lines = [f"# Abnormal {cfg['target']} events in {cfg['csv']}", ""]
    lines += ["## Data", "",
              f"- File: `{cfg['csv']}`, {notes['rows_read']} rows; time column `{cfg['time_col']}`, "
              f"analysed column `{cfg['target']}`"
              + (f", outdoor temperature `{cfg['temperature']}` (degrees {unit_t})."
                 if cfg.get("temperature") else "; no temperature column, so no weather adjustment."),
              f"- Period: {df.index[0]:%Y-%m-%d %H:%M} to {df.index[-1]:%Y-%m-%d %H:%M}, "
              f"step {notes['freq']}" + (f" (resampled to {notes['resampled_to']})"
                                          if notes.get("resampled_to") else "") + ".",
              f"- Missing values after aligning to a regular grid: {notes['missing_values']} "
              f"(including absent timestamps); duplicate timestamps averaged: "
              f"{notes['duplicate_times']}; unparsable timestamps: {notes['unparsed_times']}.",
              f"- {cfg['target']}: median {np.nanmedian(df['y']):.2f}, "
              f"min {np.nanmin(df['y']):.2f}, max {np.nanmax(df['y']):.2f}.", ""]
    tm = info.get("temperature_model")
    lines += ["## Method", "",
              f"1. Expected value: the median of the same hour of the {info['period']} over "
              f"{info['window_periods']} {info['period']}s either side (a rolling, robust profile "
              "that follows seasonal change and ignores one-off events)."]
    if tm:
        lines.append(
            f"2. Weather adjustment: heating degrees below {tm['heating_below']:g} and cooling "
            f"degrees above {tm['cooling_above']:g} degrees {unit_t}, compared with the usual "
            "temperature for that hour, fitted by robust (Huber) regression: "
            f"{tm['heating_per_degree_working_hours']:+.2f} per heating degree and "
            f"{tm['cooling_per_degree_working_hours']:+.2f} per cooling degree in working hours "
            f"({tm['heating_per_degree_off_hours']:+.2f} and {tm['cooling_per_degree_off_hours']:+.2f} "
            "outside them). It shrinks the spread of residuals from "
            f"{tm['residual_scale_before']:.2f} to {tm['residual_scale_after']:.2f}.")
    else:
        lines.append("2. Weather adjustment: none (" + (info.get("temperature_note")
                                                       or "no temperature column") + ").")
    lines += [
        "3. Residual = observed - expected. Robust z-score = (residual - median) / "
        "(1.4826 * MAD), computed separately for each hour of the day on weekdays and weekends, "
        "because working hours are noisier than nights.",
        f"4. An hour with |z| >= {p['z_on']:g} starts an event that continues while |z| >= "
        f"{p['z_off']:g}. Slow drifts and level shifts: a {p['drift_hours']}-hour rolling median "
        f"of z beyond {p['drift_on']:g} (continuing beyond {p['drift_off']:g}).",
        f"5. Flagged hours within {p['max_gap_hours']} hours of each other form one event. "
        f"Normal noise is ignored: events shorter than {p['min_hours']} hours need |z| >= "
        f"{p['z_single']:g}, and the peak deviation must be at least "
        f"{100 * p['min_relative']:.0f}% of the typical level.",
        "",
        f"## Events ({len(events)})",
        "",
    ]
    if events:
        lines += ["| # | start | end | hours | direction | kind | peak deviation | score (max abs z) |",
                  "|---|---|---|---|---|---|---|---|"]
        for i, e in enumerate(events):
            lines.append(f"| {i + 1} | {e['start']} | {e['end']} | {e['hours']:g} | {e['direction']} "
                         f"| {e['kind']} | {e['peak_deviation']:+.2f} | {e['score']:.1f} |")
        lines.append("")
        for i, e in enumerate(events):
            lines += [f"### {i + 1}. {e['kind']}: {e['start']} to {e['end']} ({e['hours']:g} h)", "",
                      f"- When: {e['when']}.",
                      f"- Energy: observed mean {e['observed_mean']:.2f} vs expected "
                      f"{e['expected_mean']:.2f} ({e['deviation_pct']:+.1f}%), total deviation "
                      f"{e['total_deviation']:+.1f}; peak {e['peak_deviation']:+.2f} at "
                      f"{e['peak_time']} (z = {e['score']:.1f}).",
                      f"- Plausible explanation: {e['explanation']}", ""]
    else:
        lines += ["No abnormal events: every deviation stayed within normal operating noise.", ""]
    lines += ["## Caveats", "",
              "- Explanations are inferred only from timestamps, the energy values and outdoor "
              "temperature; confirm them with the building's operators and logs.",
              "- The first and last weeks have fewer neighbours for the baseline, so they are "
              "judged less precisely.", ""]
    path.write_text(ascii_text("\n".join(lines)), encoding="ascii")


def write_json(path: Path, events: list[dict]) -> None:
    path.write_text(json.dumps({"events": events}, indent=2, sort_keys=True))


WRITERS = {".csv": "csv", ".png": "plot", ".svg": "plot", ".pdf": "plot", ".jpg": "plot",
           ".md": "report", ".txt": "report", ".json": "json"}


def run(cfg: dict) -> dict:
    p = {**DEFAULTS, **cfg.get("params", {})}
    df, notes = load(cfg)
    hours_per_step = (df.index[1] - df.index[0]).total_seconds() / 3600.0
    base, info = baseline(df, p)
    base["z"] = robust_z(base)
    for _ in range(p["refine_passes"]):
        # Refit without the hours that stand out, then score every hour against the cleaner fit.
        mask = hysteresis(base["z"].values, p["z_off"], p["z_off"]) != 0
        base, info = baseline(df, p, mask)
        base["z"] = robust_z(base)
    df = base
    raw_events = find_events(df, p, hours_per_step)
    unit_t = cfg.get("temperature_unit") or "C"
    events = [describe(e, df, info, unit_t, hours_per_step) for e in raw_events]
    written, skipped = [], []
    for out in cfg.get("outputs", []):
        path = Path(out)
        kind = WRITERS.get(path.suffix.lower())
        if kind is None:
            skipped.append(out)
            continue
        path.parent.mkdir(parents=True, exist_ok=True)
        if kind == "csv":
            write_csv(path, events)
        elif kind == "plot":
            write_plot(path, df, events, cfg)
        elif kind == "report":
            write_report(path, df, events, cfg, notes, info, p)
        else:
            write_json(path, events)
        written.append(out)
    return {
        "events": len(events),
        "high": sum(e["direction"] == "high" for e in events),
        "low": sum(e["direction"] == "low" for e in events),
        "list": [{k: e[k] for k in ("start", "end", "hours", "direction", "kind", "score")}
                 for e in events[:12]],
        "written": written,
        "skipped": skipped,
        "baseline": info,
        "data": notes,
    }


def main(argv: list[str]) -> None:
    if len(argv) != 1:
        sys.exit("usage: analyse.py CONFIG.json")
    cfg = json.loads(Path(argv[0]).read_text())
    result = run(cfg)
    print(f"analysed {cfg['csv']} ({cfg['target']}): {result['events']} event(s), "
          f"{result['high']} high and {result['low']} low")
    for i, e in enumerate(result["list"]):
        print(f"  {i + 1:>2}. {e['start']} -> {e['end']}  {e['hours']:>6g} h  {e['direction']:<4} "
              f"{e['kind']:<16} score {e['score']:.1f}")
    for out in result["written"]:
        print(f"wrote {out} ({Path(out).stat().st_size} bytes)")
    for out in result["skipped"]:
        print(f"cannot write {out}: unsupported file type")
    print(MARK + " " + json.dumps(result, sort_keys=True, default=str))


if __name__ == "__main__":
    main(sys.argv[1:])

#!/usr/bin/env python3
"""Seeded generator for the showcase: 90 days of hourly office-building energy with injected events.

Why synthetic: the showcase needs a file we may ship and a ground truth we can score against. The
series is built from the same parts a real office meter has (weekday working hours, quiet nights and
weekends, heating below ~15 degrees C, cooling above ~22 degrees C, noise) plus six events of the
kinds analysts meet in practice. Same seed, same bytes: `python generate.py` reproduces the files
committed next to it.
"""

from __future__ import annotations

import argparse
import csv
from pathlib import Path

import numpy as np

START = np.datetime64("2024-03-01T00:00")  # a Friday; Easter Monday 2024 is April 1

# (kind, start, end inclusive) of every injected event; the ground truth written next to the data.
EVENTS = [
    ("night_spike", "2024-03-13T01:00", "2024-03-13T04:00"),
    ("weekend_stuck_high", "2024-03-23T06:00", "2024-03-24T20:00"),
    ("holiday_closed", "2024-04-01T07:00", "2024-04-01T18:00"),
    ("meter_dropout", "2024-04-10T10:00", "2024-04-10T15:00"),
    ("slow_drift", "2024-04-22T00:00", "2024-04-28T23:00"),
    ("evening_high", "2024-05-08T19:00", "2024-05-08T23:00"),
]


def temperature(hours: np.ndarray, rng: np.random.Generator) -> np.ndarray:
    """Spring in a temperate city: 6 -> 21 degrees C daily mean, a diurnal cycle and weather spells."""
    days = hours / 24.0
    n_days = int(np.ceil(days.max())) + 1
    spells = np.zeros(n_days)
    for d in range(1, n_days):
        spells[d] = 0.75 * spells[d - 1] + rng.normal(0.0, 1.6)
    day_anomaly = np.interp(days, np.arange(n_days), spells)
    seasonal = 6.0 + 15.0 * days / 90.0
    diurnal = 4.5 * np.cos(2 * np.pi * ((hours % 24) - 15) / 24.0)
    return seasonal + diurnal + day_anomaly + rng.normal(0.0, 0.4, hours.size)


def normal_load(stamps: np.ndarray, temp: np.ndarray, rng: np.random.Generator) -> np.ndarray:
    """Office load: working-hours plateau on weekdays, low nights and weekends, weather-driven HVAC."""
    hour = (stamps - stamps.astype("datetime64[D]")).astype("timedelta64[h]").astype(int)
    weekday = ((stamps.astype("datetime64[D]").astype(int) + 3) % 7) < 5  # 1970-01-01 was a Thursday
    ramp = np.clip((hour - 6) / 2.0, 0, 1) * np.clip((19 - hour) / 2.0, 0, 1)
    occupied = weekday * ramp
    base = 38.0 + 70.0 * occupied
    heating = np.clip(15.0 - temp, 0, None) * (1.2 + 2.3 * occupied)
    cooling = np.clip(temp - 22.0, 0, None) * (0.8 + 5.5 * occupied)
    noise = np.zeros(stamps.size)
    for i in range(1, stamps.size):
        noise[i] = 0.5 * noise[i - 1] + rng.normal(0.0, 1.0)
    scale = 2.0 + 0.035 * base
    return base + heating + cooling + scale * noise


def inject(stamps: np.ndarray, load: np.ndarray, temp: np.ndarray) -> np.ndarray:
    """Apply the EVENTS to a copy of the load."""
    out = load.copy()
    for kind, start, end in EVENTS:
        sel = (stamps >= np.datetime64(start)) & (stamps <= np.datetime64(end))
        idx = np.flatnonzero(sel)
        if kind == "night_spike":
            out[idx] += np.array([55.0, 80.0, 75.0, 50.0])
        elif kind == "weekend_stuck_high":
            out[idx] = 100.0 + np.clip(15.0 - temp[idx], 0, None) * 3.0 + (out[idx] - load[idx])
            out[idx] += 3.0 * np.sin(np.arange(idx.size) / 3.0)
        elif kind == "holiday_closed":
            out[idx] = 40.0 + np.clip(15.0 - temp[idx], 0, None) * 1.2 + 2.0 * np.cos(idx)
        elif kind == "meter_dropout":
            out[idx] = np.array([0.0, 0.0, 0.2, 0.0, 0.1, 0.0])
        elif kind == "slow_drift":
            out[idx] += load[idx] * 0.45 * np.linspace(0.0, 1.0, idx.size)
        elif kind == "evening_high":
            out[idx] += np.array([45.0, 60.0, 62.0, 58.0, 40.0])
    return out


def generate(seed: int, days: int) -> tuple[list[list[str]], list[list[str]]]:
    """Rows of the data CSV and of the ground truth CSV."""
    rng = np.random.default_rng(seed)
    stamps = START + np.arange(days * 24).astype("timedelta64[h]")
    hours = np.arange(stamps.size, dtype=float)
    temp = temperature(hours, rng)
    load = inject(stamps, normal_load(stamps, temp, rng), temp)
    end = stamps[-1]
    missing = set(rng.choice(stamps.size, size=4, replace=False).tolist())
    gap = set(range(stamps.size // 2 + 7, stamps.size // 2 + 10))  # three hours absent from the export
    rows = []
    for i, (t, e, c) in enumerate(zip(stamps, load, temp)):
        if i in gap:
            continue
        stamp = str(t).replace("T", " ") + ":00"
        energy = "" if i in missing else f"{max(e, 0.0):.2f}"
        rows.append([stamp, energy, f"{c:.1f}"])
    truth = [
        [kind, s.replace("T", " ") + ":00", e.replace("T", " ") + ":00"]
        for kind, s, e in EVENTS
        if np.datetime64(s) <= end
    ]
    return rows, truth


def write_csv(path: Path, header: list[str], rows: list[list[str]]) -> None:
    path.parent.mkdir(parents=True, exist_ok=True)
    with path.open("w", newline="", encoding="ascii") as fh:
        writer = csv.writer(fh, lineterminator="\n")
        writer.writerow(header)
        writer.writerows(rows)


def main() -> None:
    here = Path(__file__).resolve().parent
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--seed", type=int, default=7)
    ap.add_argument("--days", type=int, default=90)
    ap.add_argument("--out", type=Path, default=here / "data" / "building_energy.csv")
    ap.add_argument("--truth", type=Path, default=here / "ground_truth.csv")
    args = ap.parse_args()
    rows, truth = generate(args.seed, args.days)
    write_csv(args.out, ["timestamp", "energy_kwh", "outdoor_temp_c"], rows)
    write_csv(args.truth, ["start", "end", "kind"], [[s, e, k] for k, s, e in truth])
    print(f"wrote {len(rows)} rows to {args.out} and {len(truth)} events to {args.truth}")


if __name__ == "__main__":
    main()

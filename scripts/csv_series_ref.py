#!/usr/bin/env python3
"""Reference values for test/test_csv_series.c, computed with the public
forecasting code's formulas (data_provider/data_loader.py of Informer,
Autoformer, iTransformer: Dataset_ETT_hour and Dataset_Custom; utils/
timefeatures.py for timeF) and numpy. Prints C initialisers to paste into the
test. Needs only python3 and numpy (Debian's python3-numpy).

    python3 scripts/csv_series_ref.py [../shared/data/timeseries]
"""
import csv
import datetime
import os
import sys

import numpy as np

SAMPLE = "data/timeseries-sample/sample_ETTh2_first1728.csv"
SHARED = sys.argv[1] if len(sys.argv) > 1 else "../shared/data/timeseries"


def read(path):
    with open(path, newline="") as f:
        rows = list(csv.reader(f))
    header, body = rows[0], rows[1:]
    dates = [r[0] for r in body]
    vals = np.array([[float(x) for x in r[1:]] for r in body], dtype=np.float64)
    return header, dates, vals


def ett_hour(n, seq_len, pred_len):
    # Dataset_ETT_hour.__read_data__
    border1s = [0, 12 * 30 * 24 - seq_len, 12 * 30 * 24 + 4 * 30 * 24 - seq_len]
    border2s = [12 * 30 * 24, 12 * 30 * 24 + 4 * 30 * 24, 12 * 30 * 24 + 8 * 30 * 24]
    return border1s, border2s, [b2 - b1 - seq_len - pred_len + 1 for b1, b2 in zip(border1s, border2s)]


def custom(n, seq_len, pred_len):
    # Dataset_Custom.__read_data__; __len__ = len(data_x) - seq_len - pred_len + 1
    num_train = int(n * 0.7)
    num_test = int(n * 0.2)
    num_vali = n - num_train - num_test
    border1s = [0, num_train - seq_len, n - num_test - seq_len]
    border2s = [num_train, num_train + num_vali, n]
    return border1s, border2s, [b2 - b1 - seq_len - pred_len + 1 for b1, b2 in zip(border1s, border2s)]


def c_split(tag, fn, n, seq, pred):
    b1, b2, w = fn(n, seq, pred)
    return "    {%s, %d, %d, {%d, %d, %d}, {%d, %d, %d}, {%d, %d, %d}}," % (
        tag, seq, pred, *b1, *b2, *w)


def timef_h(s):
    # HourOfDay, DayOfWeek, DayOfMonth, DayOfYear of utils/timefeatures.py
    d = datetime.datetime.strptime(s, "%Y-%m-%d %H:%M:%S")
    doy = d.timetuple().tm_yday
    return [d.hour / 23.0 - 0.5, d.weekday() / 6.0 - 0.5, (d.day - 1) / 30.0 - 0.5, (doy - 1) / 365.0 - 0.5]


def main():
    pairs = [(96, 96), (96, 720), (336, 336), (720, 96)]
    print("/* split borders: {seq_len, pred_len, border1s, border2s, windows} */")
    if os.path.exists(os.path.join(SHARED, "ETTh2.csv")):
        _, _, v = read(os.path.join(SHARED, "ETTh2.csv"))
        print("/* ETTh2.csv: %d rows (Dataset_ETT_hour) */" % len(v))
        for s, p in pairs:
            print(c_split("0", ett_hour, len(v), s, p))
        tr = v[:12 * 30 * 24]
        print("/* ETTh2 training part mean / std (ddof 0) */")
        print("    mean {%s}" % ", ".join("%.17g" % x for x in tr.mean(0)))
        print("    std  {%s}" % ", ".join("%.17g" % x for x in tr.std(0)))
        _, _, ve = read(os.path.join(SHARED, "exchange_rate.csv"))
        print("/* exchange_rate.csv: %d rows (Dataset_Custom) */" % len(ve))
        for s, p in pairs:
            print(c_split("1", custom, len(ve), s, p))
    header, dates, v = read(SAMPLE)
    n = len(v)
    print("/* %s: %d rows (Dataset_Custom) */" % (SAMPLE, n))
    for s, p in pairs[:1] + [(48, 24)]:
        print(c_split("2", custom, n, s, p))
    b1, b2, w = custom(n, 96, 96)
    tr = v[: b2[0]]
    mean, std = tr.mean(0), tr.std(0)
    print("/* sample training part (rows 0..%d) mean / std, numpy ddof=0 */" % (b2[0] - 1))
    print("static const double sample_mean[7] = {%s};" % ", ".join("%.17g" % x for x in mean))
    print("static const double sample_std[7] = {%s};" % ", ".join("%.17g" % x for x in std))
    z = ((v - mean) / std).astype(np.float32).astype(np.float64)
    # test split, window 5, M: x rows b1+5 .., y rows b1+5+96 ..
    r0 = b1[2] + 5
    print("/* test window 5: x[0][0], x[95][6], y[0][6], y[95][3] (standardised, float32) */")
    print("static const float sample_w5[4] = {%.9gf, %.9gf, %.9gf, %.9gf};" % (
        z[r0, 0], z[r0 + 95, 6], z[r0 + 96, 6], z[r0 + 96 + 95, 3]))
    for split, name in ((1, "val"), (2, "test")):
        se = ae = 0.0
        cnt = 0
        for i in range(w[split]):
            last = b1[split] + i + 96 - 1
            e = z[last + 1:last + 97, :] - z[last, :]
            se += (e ** 2).sum()
            ae += np.abs(e).sum()
            cnt += e.size
        e_ot = []
        for i in range(w[split]):
            last = b1[split] + i + 96 - 1
            e_ot.append((z[last + 1:last + 97, 6] - z[last, 6]) * std[6])
        e_ot = np.concatenate(e_ot)
        print("/* naive baseline, %s split, M, standardised: mse %.12g mae %.12g; MS (OT) in original units: "
              "mse %.12g mae %.12g */" % (name, se / cnt, ae / cnt, (e_ot ** 2).mean(), np.abs(e_ot).mean()))
    print("/* timeF (freq h) */")
    for s in ("2016-07-01 00:00:00", "2016-12-31 23:00:00", "2017-03-05 13:00:00", "2020-02-29 06:00:00"):
        print('    {"%s", {%s}},' % (s, ", ".join("%.9gf" % x for x in timef_h(s))))


if __name__ == "__main__":
    main()

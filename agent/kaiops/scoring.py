"""Macro and per-class precision/recall/F1, FNR and FPR as KAIOPS reports them (Tables III-V): FNR is the macro
mean of per-class FN/(FN+TP) (= 1 − macro recall, which matches the paper's 0.3053 vs recall 0.6947) and FPR the
macro mean of per-class FP/(FP+TN). Also the binary view: anomalies called Normal, Normal called an anomaly."""

from __future__ import annotations

import numpy as np

from agent.kaiops import CLASSES


def score(y_true: np.ndarray, y_pred: np.ndarray) -> dict:
    y_true, y_pred = np.asarray(y_true), np.asarray(y_pred)
    per_class, ps, rs, fs, fprs = {}, [], [], [], []
    for c, name in enumerate(CLASSES):
        tp = int(np.sum((y_pred == c) & (y_true == c)))
        fp = int(np.sum((y_pred == c) & (y_true != c)))
        fn = int(np.sum((y_pred != c) & (y_true == c)))
        tn = len(y_true) - tp - fp - fn
        p = tp / (tp + fp) if tp + fp else 0.0
        r = tp / (tp + fn) if tp + fn else 0.0
        f = 2 * p * r / (p + r) if p + r else 0.0
        per_class[name] = {"p": round(p, 4), "r": round(r, 4), "f1": round(f, 4), "support": tp + fn}
        ps.append(p)
        rs.append(r)
        fs.append(f)
        fprs.append(fp / (fp + tn) if fp + tn else 0.0)
    anomalies, normals = y_true != 0, y_true == 0
    return {"macro_p": round(float(np.mean(ps)), 4), "macro_r": round(float(np.mean(rs)), 4),
            "macro_f1": round(float(np.mean(fs)), 4), "fnr": round(1 - float(np.mean(rs)), 4),
            "fpr": round(float(np.mean(fprs)), 4),
            "anomaly_fnr": round(float(np.mean(y_pred[anomalies] == 0)) if anomalies.any() else 0.0, 4),
            "normal_fpr": round(float(np.mean(y_pred[normals] != 0)) if normals.any() else 0.0, 4),
            "per_class": per_class}

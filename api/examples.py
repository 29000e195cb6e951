"""Examples shown in the OpenAPI document (trimmed from ``examples/snapshots/qoe-deadlines.json``:
a real Alibaba-trace node shape and the first epochs of a measured CIFAR-10 curve)."""

from __future__ import annotations

from typing import Any

SNAPSHOT: dict[str, Any] = {
    "apiVersion": "flowplan/v1",
    "kind": "Snapshot",
    "time": 1767000000,
    "nodes": [{"name": "openb-node-0035", "cpu_millis": 96000, "gpus": 4, "memory_mib": 393216, "gpu_type": "T4"}],
    "jobs": [
        {
            "id": "cifar10-bs256-a",
            "status": "running",
            "node": "openb-node-0035",
            "allocation": {"cpu_millis": 12000, "gpus": 1},
            "min_cpu_millis": 12000,
            "max_cpu_millis": 12000,
            "min_gpus": 1,
            "max_gpus": 4,
            "memory_mib": 49152,
            "submitted": 1766999498.8,
            "history": [
                {"time": 1766999655.8, "epoch": 1, "metric": 0.4229},
                {"time": 1766999692.8, "epoch": 2, "metric": 0.4378},
                {"time": 1766999729.9, "epoch": 3, "metric": 0.5944},
                {"time": 1766999766.9, "epoch": 4, "metric": 0.6555},
            ],
            "speed": [{"cpu_millis": 12000, "gpus": 1, "seconds_per_epoch": 37.0}],
            "target": {
                "metric": "accuracy",
                "direction": "higher",
                "tier1": {"value": 0.8961, "deadline": 1767002220.4},
                "tier2": {"value": 0.9244},
                "max_epochs": 100,
            },
        },
        {
            "id": "cifar10-bs128-c",
            "status": "pending",
            "min_cpu_millis": 4000,
            "max_cpu_millis": 4000,
            "min_gpus": 1,
            "max_gpus": 4,
            "memory_mib": 31250,
            "submitted": 1766999400.0,
            "target": {
                "metric": "accuracy",
                "direction": "higher",
                "tier1": {"value": 0.8503, "deadline": 1767000725.8},
                "tier2": {"value": 0.9259, "deadline": 1767005806.5},
                "max_epochs": 100,
            },
        },
    ],
    "settings": {"interval_seconds": 60.0, "migration_budget": 2},
}

TARGET: dict[str, Any] = {
    "metric": "accuracy",
    "direction": "higher",
    "tier1": {"value": 0.8961, "deadline": 1767002220.4},
    "tier2": {"value": 0.9244},
    "max_epochs": 100,
}

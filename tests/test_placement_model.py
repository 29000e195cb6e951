"""Placement model (``models/placement.py``) and the step-table reader (``models/step_tables.py``).

Real data: the measured ``placements.csv`` / ``scalability.csv`` of every model in the Pollux /
AdaptDL OSDI'21 artifact (``../shared/data``); nothing is faked.

Case matrix:

| area          | case                                                        | expectation                                   |
|---------------|-------------------------------------------------------------|-----------------------------------------------|
| recovery      | known parameters, 1-4 nodes x 1-4 GPUs x 3 batches, sync     | noise 0: held-out (6-16 nodes, 64 replicas)   |
|               | known; noise 0 / 2 %                                        | within 2 %; 2 %: within 6 %                   |
| held out      | every measured model: fit on 1,2,3,4,11,44,111,444,1111,4444 | median / p90 of the other placements.csv rows |
|               | (all local batches), no prior                               | below bounds measured at writing (x1.5)       |
| table prior   | fitted on placements.csv (1-4 nodes), predicts               | median / p90 below bounds measured (x1.5)     |
|               | scalability.csv (6-16 nodes)                                |                                               |
| online prior  | a cluster whose network is 2x slower and compute 0.7x the    | 3 observations + prior: held-out error < 1/3  |
|               | measured one; 3 observations                                | of the prior's and below the no-prior fit's   |
| no prior      | one-node observations only                                  | inter-node link = intra-node (held, named)    |
| properties    | every table prior                                           | step non-decreasing in the batch; >= compute; |
|               |                                                             | same nodes and replicas -> same step;         |
|               |                                                             | two nodes slower than one at equal replicas;  |
|               |                                                             | throughput = K b / step; vector = scalar      |
| determinism   | the same fit twice                                          | identical parameters                          |
| few data      | no observations with a prior; one observation               | the prior itself; finite > 0 on huge inputs   |
| bad input     | NaN / inf / 0 / negative times, sync >= step, bad placement, | PlacementError naming the field and value     |
|               | bad batch, nothing and no prior; malformed table files       | StepTableError naming file:line and field     |
"""

from __future__ import annotations

import math
from dataclasses import replace
from pathlib import Path

import numpy as np
import pytest

from models.placement import (
    PlacementError,
    PlacementObservation,
    PlacementParams,
    PlacementSpeedModel,
    fit_placement_model,
    table_observations,
    table_prior,
)
from models.step_tables import StepTableError, read_model_steps, read_placements, read_scalability, table_models

#: The default held-out split of benchmarks/bench_placement.py: the one-node placements with, for
#: each node count 2-4, one and four replicas per node.
FIT_SPLIT = {(1,), (2,), (3,), (4,), (1, 1), (4, 4), (1, 1, 1), (4, 4, 4), (1, 1, 1, 1), (4, 4, 4, 4)}
#: Measured at writing (bench_placement.py): held-out median 6-8 %, p90 15-23 % over the six models;
#: bounds are the worst x 1.5.
HELD_OUT_MEDIAN_BOUND = 0.12
HELD_OUT_P90_BOUND = 0.35
#: Measured at writing: table prior from placements.csv on scalability.csv, median 4-14 %, p90 12-42 %.
PRIOR_MEDIAN_BOUND = 0.21
PRIOR_P90_BOUND = 0.63

TRUTH = PlacementParams(0.05, 0.002, 0.01, 0.004, 0.08, 0.006, 1.8)


def _models(data_dir: Path) -> list[str]:
    names = table_models(data_dir)
    assert len(names) >= 6, names
    return names


def _errors(model: PlacementSpeedModel, obs: list[PlacementObservation]) -> np.ndarray:
    return np.array([abs(model.step_seconds(o.placement, o.local_batch) - o.step_seconds) / o.step_seconds for o in obs])


def _truth_obs(
    params: PlacementParams, placements: list[tuple[int, ...]], batches: tuple[float, ...], noise: float, seed: int = 0
):
    truth = PlacementSpeedModel(params, 0, "prior")
    rng = np.random.default_rng(seed)
    out = []
    for p in placements:
        for b in batches:
            step = truth.step_seconds(p, b) * (1 + noise * float(rng.standard_normal()))
            compute = truth.compute_seconds(b) * (1 + noise * float(rng.standard_normal()))
            out.append(PlacementObservation(p, b, step, max(0.0, step - compute) if len(p) > 1 or sum(p) > 1 else None))
    return truth, out


# --------------------------------------------------------------------------------------------------
# Recovery of known parameters
# --------------------------------------------------------------------------------------------------

GRID = [(1,), (2,), (3,), (4,), (1, 1), (2, 2), (4, 4), (1, 1, 1), (4, 4, 4), (2, 2, 2, 2)]
FAR = [(4,) * 16, (4,) * 8, (2,) * 6, (3, 3, 3, 3, 3, 3), (4, 4, 4, 4, 4, 4, 4, 1)]


@pytest.mark.parametrize(("noise", "bound"), [(0.0, 0.02), (0.02, 0.06)])
def test_recovers_known_parameters(noise: float, bound: float) -> None:
    """Noise 0 is not exact: the pull of the overlap towards 1 (AdaptDL's regulariser) biases it
    (1.69 for 1.8 at writing; worst prediction 1.1 % off)."""
    truth, obs = _truth_obs(TRUTH, GRID, (8.0, 32.0, 128.0), noise)
    model = fit_placement_model(obs)
    assert model.source == "fitted" and model.held == ()
    far = [PlacementObservation(p, b, truth.step_seconds(p, b)) for p in FAR for b in (16.0, 64.0)]
    assert float(np.max(_errors(model, far))) < bound


# --------------------------------------------------------------------------------------------------
# Measured tables
# --------------------------------------------------------------------------------------------------


def test_held_out_placements_every_model(data_dir: Path) -> None:
    for name in _models(data_dir):
        steps = read_model_steps(data_dir, name)
        plc = [s for s in steps if s.table == "placements"]
        model = fit_placement_model(table_observations([s for s in plc if s.placement in FIT_SPLIT]))
        test = table_observations([s for s in plc if s.placement not in FIT_SPLIT])
        errs = _errors(model, test)
        assert len(errs) > 400, name
        assert float(np.median(errs)) < HELD_OUT_MEDIAN_BOUND, name
        assert float(np.percentile(errs, 90)) < HELD_OUT_P90_BOUND, name


def test_table_prior_predicts_more_nodes(data_dir: Path) -> None:
    for name in _models(data_dir):
        steps = read_model_steps(data_dir, name)
        prior = table_prior([s for s in steps if s.table == "placements"])
        far = table_observations([s for s in steps if s.table == "scalability"])
        assert min(len(o.placement) for o in far) >= 6
        errs = _errors(prior, far)
        assert float(np.median(errs)) < PRIOR_MEDIAN_BOUND, name
        assert float(np.percentile(errs, 90)) < PRIOR_P90_BOUND, name


@pytest.mark.parametrize("name", ["bert", "cifar10", "deepspeech2", "imagenet", "ncf", "yolov3"])
def test_prior_and_few_observations_on_another_cluster(data_dir: Path, name: str) -> None:
    """The measured model moved to a cluster with a 2x slower network and 0.7x compute time."""
    prior = table_prior(read_model_steps(data_dir, name))
    p = prior.params
    other = replace(
        p,
        compute_base=0.7 * p.compute_base,
        compute_per_sample=0.7 * p.compute_per_sample,
        intra_base=2 * p.intra_base,
        inter_base=2 * p.inter_base,
    )
    batch = float(np.median([s.local_batch for s in read_model_steps(data_dir, name)]))
    truth, obs = _truth_obs(other, [(1,), (4,), (2, 2)], (batch,), 0.0)
    held = [PlacementObservation(q, b, truth.step_seconds(q, b)) for q in GRID + FAR for b in (batch / 2, batch)]
    with_prior = fit_placement_model(obs, prior=prior)
    without = fit_placement_model(obs)
    assert with_prior.source == "fitted+prior" and with_prior.n_observations == 3
    e_prior, e_fit, e_none = (float(np.median(_errors(m, held))) for m in (prior, with_prior, without))
    assert e_fit < e_prior / 3, (e_fit, e_prior)
    assert e_fit < e_none, (e_fit, e_none)


def test_one_node_only_assumes_inter_as_intra(data_dir: Path) -> None:
    steps = read_model_steps(data_dir, "cifar10")
    model = fit_placement_model(table_observations([s for s in steps if s.placement in {(1,), (2,), (3,), (4,)}]))
    assert any("inter_base, inter_per_replica = the intra-node ones" in h for h in model.held)
    p = model.params
    assert (p.inter_base, p.inter_per_replica) == (p.intra_base, p.intra_per_replica)
    assert model.step_seconds((2, 2), 64) == pytest.approx(model.step_seconds((4,), 64))


# --------------------------------------------------------------------------------------------------
# Properties
# --------------------------------------------------------------------------------------------------


@pytest.fixture(scope="module")
def priors(data_dir: Path) -> dict[str, PlacementSpeedModel]:
    return {name: table_prior(read_model_steps(data_dir, name)) for name in _models(data_dir)}


def test_properties_of_every_table_prior(priors: dict[str, PlacementSpeedModel]) -> None:
    batches = (1.0, 8.0, 64.0, 1024.0)
    for name, m in priors.items():
        assert m.source == "fitted" and m.relative_rmse is not None and m.relative_rmse < 0.2, name
        for placement in [(1,), (2,), (4,), (1, 1), (4, 4, 2), (4,) * 16]:
            steps = [m.step_seconds(placement, b) for b in batches]
            assert all(b >= a for a, b in zip(steps, steps[1:], strict=False)), (name, placement)
            for b in batches:
                assert m.step_seconds(placement, b) >= m.compute_seconds(b) > 0
                assert m.sync_seconds(placement, b) >= 0
                assert m.throughput(placement, b) == pytest.approx(sum(placement) * b / m.step_seconds(placement, b))
        assert m.sync_seconds((1,), 8) == pytest.approx(0.0)
        # Same nodes and replicas: the same step, however the replicas are spread.
        assert m.step_seconds((2, 2), 8) == m.step_seconds((3, 1), 8) == m.step_seconds((1, 3, 0), 8)
        # Measured on every model: the all-reduce across nodes is slower than within one.
        for k in (2, 3, 4):
            split = (k - 1, 1)
            assert m.step_seconds(split, 8) > m.step_seconds((k,), 8), (name, k)
        nodes, reps, bs = np.array([1, 2, 4, 16]), np.array([1, 4, 13, 64]), np.array([8.0, 8.0, 3.0, 100.0])
        vec = m.step_seconds_many(nodes, reps, bs)
        scal = [m.step_seconds((r - n + 1,) + (1,) * (n - 1), b) for n, r, b in zip(nodes, reps, bs, strict=True)]
        assert np.allclose(vec, scal, rtol=1e-12)


def test_fit_is_deterministic(data_dir: Path) -> None:
    obs = table_observations(read_model_steps(data_dir, "deepspeech2"))
    assert fit_placement_model(obs) == fit_placement_model(obs)


def test_few_data(priors: dict[str, PlacementSpeedModel]) -> None:
    prior = priors["imagenet"]
    none = fit_placement_model([], prior=prior)
    assert none.source == "prior" and none.params == prior.params and none.n_observations == 0
    one = fit_placement_model([PlacementObservation((4, 4), 32, 0.5, 0.2)])
    assert one.source == "fitted" and one.n_observations == 1
    assert one.step_seconds((4, 4), 32) == pytest.approx(0.5, rel=0.05)
    for m in (none, one, prior):
        for placement, batch in [((1,), 1e-6), ((10**6,), 1e12), ((1,) * 1000, 1.0)]:
            t = m.step_seconds(placement, batch)
            assert math.isfinite(t) and t > 0


# --------------------------------------------------------------------------------------------------
# Bad input
# --------------------------------------------------------------------------------------------------

GOOD = PlacementObservation((2, 2), 32.0, 0.4, 0.1)


@pytest.mark.parametrize(
    ("obs", "field"),
    [
        (replace(GOOD, step_seconds=math.nan), "observations[1].step_seconds"),
        (replace(GOOD, step_seconds=math.inf), "observations[1].step_seconds"),
        (replace(GOOD, step_seconds=0.0), "observations[1].step_seconds"),
        (replace(GOOD, step_seconds=-1.0), "observations[1].step_seconds"),
        (replace(GOOD, sync_seconds=math.nan), "observations[1].sync_seconds"),
        (replace(GOOD, sync_seconds=-0.1), "observations[1].sync_seconds"),
        (replace(GOOD, sync_seconds=0.4), "observations[1].sync_seconds"),
        (replace(GOOD, placement=()), "observations[1].placement"),
        (replace(GOOD, placement=(0, 0)), "observations[1].placement"),
        (replace(GOOD, placement=(-1, 2)), "observations[1].placement"),
        (replace(GOOD, placement=(2.5,)), "observations[1].placement"),
        (replace(GOOD, placement="22"), "observations[1].placement"),  # type: ignore[arg-type]
        (replace(GOOD, placement=None), "observations[1].placement"),  # type: ignore[arg-type]
        (replace(GOOD, local_batch=0.0), "observations[1].local_batch"),
        (replace(GOOD, local_batch=math.nan), "observations[1].local_batch"),
    ],
)
def test_bad_observation_names_the_field(obs: PlacementObservation, field: str) -> None:
    with pytest.raises(PlacementError) as err:
        fit_placement_model([GOOD, obs])
    message = str(err.value)
    assert message.startswith(field + ":") and "\n" not in message


def test_bad_queries_and_nothing_to_fit() -> None:
    with pytest.raises(PlacementError, match=r"^observations: none, and no prior"):
        fit_placement_model([])
    model = fit_placement_model([GOOD, PlacementObservation((1,), 32.0, 0.3)])
    with pytest.raises(PlacementError, match=r"^local_batch:"):
        model.step_seconds((2,), -4)
    with pytest.raises(PlacementError, match=r"^placement:"):
        model.throughput((), 8)
    with pytest.raises(PlacementError, match=r"^nodes, replicas, local_batch:"):
        model.step_seconds_many(np.array([3]), np.array([2]), np.array([8.0]))
    with pytest.raises(PlacementError, match=r"^nodes, replicas, local_batch:"):
        model.step_seconds_many(np.array([1]), np.array([2]), np.array([math.nan]))


@pytest.mark.parametrize(
    ("text", "reader", "message"),
    [
        ("placement,local_bsz,step_time,sync_time\n22,8,0.5,0.1\n2x,8,0.5,0.1\n", read_placements, ":3: placement:"),
        ("placement,local_bsz,step_time,sync_time\n22,eight,0.5,0.1\n", read_placements, ":2: local_bsz: not a number"),
        ("placement,local_bsz,step_time\n22,8,0.5\n", read_placements, ": missing column(s) sync_time"),
        ("num_nodes,num_replicas,local_bsz,step_time,sync_time\n6,6,8,,0.1\n", read_scalability, ":2: step_time: not a number"),
    ],
)
def test_malformed_tables(tmp_path: Path, text: str, reader, message: str) -> None:
    path = tmp_path / "table.csv"
    path.write_text(text)
    with pytest.raises(StepTableError) as err:
        reader(path)
    assert message in str(err.value) and str(path) in str(err.value)
    with pytest.raises(StepTableError, match="no such file"):
        reader(tmp_path / "missing.csv")

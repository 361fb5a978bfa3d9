"""The end-to-end pools benchmark: its table takes medians per layout and the ratio to the shared pool, and flags it
sets itself, or nonsense sizes, are one `error:` line."""

import pytest

from benchmarks import env_pools


def test_the_table_has_the_medians_of_each_layout_and_their_ratio():
    runs = [dict(pools="shared", sps=sps, cpu_us_per_step=100.0, background_cores=0.1) for sps in (10.0, 30.0, 20.0)]
    runs += [dict(pools="per_actor", sps=sps, cpu_us_per_step=cpu, background_cores=0.0)
             for sps, cpu in ((15.0, 90.0), (25.0, 110.0))]
    header, rule, shared, per_actor = env_pools.table(runs)
    assert shared == "| shared | 3 | 20 | 10-30 | 1.00 | 100.0 us | 0.10 |"
    assert per_actor == "| per_actor | 2 | 20 | 15-25 | 1.00 | 100.0 us | 0.00 |"
    assert "steady SPS (median)" in header and rule.count("|") == header.count("|")


@pytest.mark.parametrize("argv,message", [
    (["--args=--env=CartPole-v1 --env_pools=shared"], "--args sets --env_pools, --time_limit or --logdir"),
    (["--args=--time_limit=3"], "--args sets --env_pools, --time_limit or --logdir"),
    (["--repeats=0"], "--repeats at least 1"),
    (["--seconds=-1"], "--seconds must be positive"),
])
def test_bad_arguments_are_one_error_line(argv, message):
    with pytest.raises(SystemExit) as stop:
        env_pools.main(argv)
    assert str(stop.value).startswith("error: ") and message in str(stop.value)

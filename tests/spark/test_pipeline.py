"""streaming.spark.pipeline's own settings."""

import pytest

from streaming.config import ConfigError
from streaming.spark.pipeline import engine_hosts


@pytest.mark.parametrize("value, hosted", [("true", True), ("false", False), (" False ", False), ("TRUE", True)])
def test_engine_hosts_is_a_boolean_spark_conf(value, hosted):
    """Why: Spark confs arrive as strings; true/false in any case is what a user writes."""
    assert engine_hosts(value) is hosted


def test_anything_else_is_a_config_error_naming_the_key():
    """Why: a typo ("flase") must not silently keep the hosts on or off."""
    with pytest.raises(ConfigError, match=r"spark\.spark\.epochwatch\.engineHosts.*Fix: set it to false"):
        engine_hosts("flase")

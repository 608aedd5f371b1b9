"""Tests start brokers through the package's local broker process."""

from gregor.tools.local_broker import BrokerProcess

__all__ = ["BrokerProcess"]

"""The slow side of the race."""

import time


def slow() -> str:
    time.sleep(0.2)
    return "slow"

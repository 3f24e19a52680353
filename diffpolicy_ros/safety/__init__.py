"""The safety layer between a learned policy and the arm: a pure-Python filter core and its node."""

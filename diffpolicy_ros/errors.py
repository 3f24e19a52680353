"""The one error class a user sees as a single line, and the one way long work ends early on request.

A :class:`UserError` is raised where an input is read (a command-line argument, a graph argument, a node
parameter, a config, a checkpoint, a bag, a dataset) and names that input. The CLI and the nodes print it as one
line and exit 2; every other exception is a bug and keeps its traceback.
"""

from __future__ import annotations


class UserError(ValueError):
    """A mistake in what the user gave, which the user can fix; the message names the input."""


class StopRequested(Exception):
    """Raised inside long work (an evaluation, demo recording) when its host asked it to stop (the trainer node on
    Ctrl-C): the work ends within one step, and its caller keeps what was finished before."""


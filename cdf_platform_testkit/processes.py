"""Processes below a PID, found by scanning `/proc` (no psutil). Exited processes not yet
reaped by their parent (zombies) count as gone.

Example:
    >>> os.getpid() in descendants(1) or os.getpid() == 1  # doctest: +SKIP
    True
"""

from __future__ import annotations

import os
from pathlib import Path


def parent_and_name(pid: int) -> tuple[int, str] | None:
    try:
        text = Path(f"/proc/{pid}/stat").read_text()
    except OSError:
        return None
    # The name is in parentheses and may itself hold spaces or parentheses.
    name = text[text.index("(") + 1 : text.rindex(")")]
    state, parent = text[text.rindex(")") + 2 :].split()[:2]
    # A zombie has exited: only its parent has yet to collect its exit status.
    return None if state == "Z" else (int(parent), name)


def process_table() -> dict[int, tuple[int, str]]:
    """Every live process: pid -> (parent pid, command name)."""
    table: dict[int, tuple[int, str]] = {}
    for entry in os.listdir("/proc"):
        if entry.isdigit():
            found = parent_and_name(int(entry))
            if found is not None:
                table[int(entry)] = found
    return table


def descendants(root: int, table: dict[int, tuple[int, str]] | None = None) -> dict[int, str]:
    """Every live descendant process of `root`: pid -> command name (from `table`, default a
    fresh `process_table()`)."""
    table = process_table() if table is None else table
    result: dict[int, str] = {}
    frontier = [root]
    while frontier:
        parent = frontier.pop()
        for pid, (ppid, name) in table.items():
            if ppid == parent and pid not in result:
                result[pid] = name
                frontier.append(pid)
    return result

"""The BFS path planner: shortest primitive-action paths over (cell, direction) states.

A state is (x, y, d) with minigrid's directions d: 0 = +x (east), 1 = +y (south), 2 = -x,
3 = -y. Moves: turn left (d - 1 mod 4), turn right (d + 1 mod 4), move forward (into the next
cell when it is passable); each costs one primitive step, so breadth-first search gives paths
with the fewest primitive steps. Ties are broken by trying forward, then left, then right, so
paths are deterministic.

Which cells are passable is the caller's choice (the env passes the cells the agent has seen
this episode whose content it can walk on; the expert passes the whole true grid).
"""

from __future__ import annotations

from collections import deque
from collections.abc import Sequence

# minigrid's primitive actions
LEFT, RIGHT, FORWARD, PICKUP, DROP, TOGGLE, DONE = range(7)
DIRS: tuple[tuple[int, int], ...] = ((1, 0), (0, 1), (-1, 0), (0, -1))
Cell = tuple[int, int]


class Reach:
    """The breadth-first search tree from one start state over a grid of passable cells.

    `passable[y * width + x]` is truthy for cells the agent may stand on; the start cell counts
    as passable whatever it holds.
    """

    def __init__(self, width: int, height: int, passable: Sequence[int], start: Cell, start_dir: int) -> None:
        self.width, self.height = width, height
        self.start = (start[0] * 4 + start_dir) + start[1] * width * 4  # state index
        n = width * height * 4
        self._parent = [-1] * n
        self._action = bytearray(n)
        self._dist = [-1] * n
        self._search(passable)

    def _search(self, passable: Sequence[int]) -> None:
        width, height = self.width, self.height
        dist, parent, action = self._dist, self._parent, self._action
        dist[self.start] = 0
        queue = deque([self.start])
        while queue:
            s = queue.popleft()
            cell, d = divmod(s, 4)
            y, x = divmod(cell, width)
            dx, dy = DIRS[d]
            nx, ny = x + dx, y + dy
            nexts = []
            if 0 <= nx < width and 0 <= ny < height and passable[ny * width + nx]:
                nexts.append(((ny * width + nx) * 4 + d, FORWARD))
            nexts.append((cell * 4 + (d - 1) % 4, LEFT))
            nexts.append((cell * 4 + (d + 1) % 4, RIGHT))
            for t, a in nexts:
                if dist[t] < 0:
                    dist[t] = dist[s] + 1
                    parent[t] = s
                    action[t] = a
                    queue.append(t)

    def _index(self, cell: Cell, d: int) -> int:
        return (cell[1] * self.width + cell[0]) * 4 + d

    def path(self, cell: Cell, d: int) -> list[int] | None:
        """Primitive actions from the start to stand on `cell` facing `d`; None if unreachable."""
        if not (0 <= cell[0] < self.width and 0 <= cell[1] < self.height):
            return None
        s = self._index(cell, d)
        if self._dist[s] < 0:
            return None
        steps: list[int] = []
        while s != self.start:
            steps.append(self._action[s])
            s = self._parent[s]
        steps.reverse()
        return steps

    def _best(self, states: list[tuple[Cell, int]]) -> list[int] | None:
        """The shortest path among candidate end states (first listed wins ties)."""
        best: list[int] | None = None
        for cell, d in states:
            p = self.path(cell, d)
            if p is not None and (best is None or len(p) < len(best)):
                best = p
        return best

    def path_to_face(self, target: Cell) -> list[int] | None:
        """Shortest path to a cell next to `target`, facing it (to pick up, toggle, go next to)."""
        tx, ty = target
        return self._best([((tx - dx, ty - dy), d) for d, (dx, dy) in enumerate(DIRS)])

    def path_to_stand(self, target: Cell) -> list[int] | None:
        """Shortest path to stand on `target` (an open door, the goal), any direction."""
        return self._best([(target, d) for d in range(4)])

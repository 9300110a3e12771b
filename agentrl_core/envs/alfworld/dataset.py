"""Game sets: the generated default set (lazy, cached on disk) and the official ALFWorld data.

Both number games like AgentGym: train ids [0, 2420), test ids [2420, 2620). The generated game
for id i depends only on (seed, i, difficulty, GENERATOR_VERSION): scenes are drawn from sub-seeds
0, 1, 2, ... and the first one that lies in its split's part of the scene space
(`envs.partition` on `scene_key`: about one scene in 8 is a test scene, so no test game's
scene — room, receptacles, objects and where they start — is any training game's) and that the
planner solves is the game (at most MAX_DRAWS draws and MAX_PLANS planner calls).
Generated games are cached as `$AGENTRL_HOME/alfworld/<GENERATOR_VERSION>/seed<seed>-<key>/<id>/`
(`traj_data.json`, then `game.tw-pddl` last: its presence marks a complete entry; each file is
written to a temporary name and renamed). `build_default_set` lays the set out like the official
`json_2.1.1` folder, with a manifest of sha256 digests.
"""

from __future__ import annotations

import hashlib
import json
import os
import random
import secrets
from collections.abc import Iterable, Sequence
from concurrent.futures import ProcessPoolExecutor
from dataclasses import asdict, dataclass
from importlib import metadata
from pathlib import Path
from typing import Any

from agentrl_core.envs.alfworld.gamefile import (
    encode,
    game_data,
    goal_met,
    make_engine,
    plan,
)
from agentrl_core.envs.alfworld.pddl import LIBRARY_KEYS, goal_sentence, problem_text
from agentrl_core.envs.alfworld.scene import Difficulty, Scene, draw_scene, scene_key, task_type_of
from agentrl_core.errors import TaskNotFoundError
from agentrl_core.system.home import agentrl_home
from agentrl_core.envs.partition import fits_part

GENERATOR_VERSION = "g2"  # g2: test scenes from the test part of the scene space only
DEFAULT_SEED = 2420
MAX_DRAWS = 512
"""Sub-seeds tried per game: a test id keeps about 1 draw in 8, so running out is (7/8)^512 ≈ 1e-30 likely."""
MAX_PLANS = 16
"""Planner calls per game (a draw in the wrong part costs no planner call)."""
DEFAULT_DIFFICULTY = Difficulty()
TRAIN_IDS = range(2420)
TEST_IDS = range(2420, 2620)
GAME_FILE = "game.tw-pddl"
TRAJ_FILE = "traj_data.json"
TEST_FOLDER = "valid_train"  # the folder AgentGym's test ids read in the official data
EXTRA_FOLDERS = ("valid_seen", "valid_unseen")


@dataclass(frozen=True)
class GeneratedGame:
    """One generated, planner-checked game: its file bytes, scene and the plan found."""

    task_id: int
    sub_seed: int
    scene: Scene
    data: bytes  # the game.tw-pddl bytes
    plan: tuple[str, ...]

    def traj_data(self, seed: int) -> dict[str, Any]:
        """The official-style `traj_data.json` fields ALFWorld's loader reads, plus our provenance."""
        s = self.scene
        return {
            "task_type": LIBRARY_KEYS[s.task_type],
            "pddl_params": {
                "object_target": s.obj, "parent_target": s.recep or "", "toggle_target": s.toggle or "",
                "mrecep_target": "", "object_sliced": False,
            },
            "agentrl": {
                "generator_version": GENERATOR_VERSION, "seed": seed, "task_id": self.task_id,
                "sub_seed": self.sub_seed, "room": s.room, "plan_length": len(self.plan),
            },
        }


def _rng(seed: int, task_id: int, sub_seed: int) -> random.Random:
    # str seeds are hashed with SHA-512 by `random`, so draws are stable across runs and machines
    return random.Random(f"agentrl-alfworld:{GENERATOR_VERSION}:{seed}:{task_id}:{sub_seed}")


def generate_game(
    task_id: int, *, seed: int = DEFAULT_SEED, difficulty: Difficulty = DEFAULT_DIFFICULTY, engine: Any = None
) -> GeneratedGame:
    """The game of `task_id`: the first sub-seed's scene in its split's part that the planner solves."""
    engine = engine if engine is not None else make_engine(admissible=False)
    task_type = task_type_of(task_id, difficulty)
    held_out, plans = task_id in TEST_IDS, 0
    for sub_seed in range(MAX_DRAWS):
        scene = draw_scene(_rng(seed, task_id, sub_seed), difficulty, task_type)
        if scene is None or not fits_part(scene_key(scene), held_out):
            continue
        problem = problem_text(scene, f"agentrl_{GENERATOR_VERSION}_{seed}_{task_id}_{sub_seed}")
        data = game_data(problem, goal_sentence(scene))
        engine.load(data)  # a fresh state: no reset (it would parse the problem again)
        commands = plan(engine)
        if commands and not goal_met(engine):
            return GeneratedGame(task_id, sub_seed, scene, encode(data), tuple(commands))
        plans += 1
        if plans >= MAX_PLANS:
            break
    raise RuntimeError(
        f"alfworld: no solvable {task_type} scene for task {task_id} (seed {seed}) within {MAX_DRAWS} sub-seeds "
        f"and {MAX_PLANS} planner calls; the difficulty {difficulty} may be too tight: allow more receptacles"
    )


def game_scene(task_id: int, traj: dict[str, Any], difficulty: Difficulty) -> Scene:
    """The scene of a cached generated game, drawn again from the sub-seed its traj_data records."""
    prov = traj["agentrl"]
    scene = draw_scene(_rng(prov["seed"], task_id, prov["sub_seed"]), difficulty, task_type_of(task_id, difficulty))
    if scene is None:
        raise RuntimeError(f"alfworld: the recorded sub-seed of task {task_id} draws no scene: stale cache?")
    return scene


def sha256(data: bytes) -> str:
    """Hex sha256 of `data`."""
    return hashlib.sha256(data).hexdigest()


def _write_atomic(path: Path, data: bytes) -> None:
    path.parent.mkdir(parents=True, exist_ok=True)
    tmp = path.with_name(f".{path.name}.tmp-{os.getpid()}-{secrets.token_hex(4)}")
    tmp.write_bytes(data)
    os.replace(tmp, path)


class GeneratedGames:
    """The generated set for one (seed, difficulty): ids -> cached game files, made on first use."""

    def __init__(self, seed: int = DEFAULT_SEED, difficulty: Difficulty = DEFAULT_DIFFICULTY) -> None:
        difficulty.validate()
        self.seed, self.difficulty = seed, difficulty
        self.splits: dict[str, Sequence[int]] = {"train": TRAIN_IDS, "test": TEST_IDS}

    @property
    def folder(self) -> Path:
        """This set's cache folder (under $AGENTRL_HOME, read at call time)."""
        return agentrl_home() / "alfworld" / GENERATOR_VERSION / f"seed{self.seed}-{self.difficulty.key()}"

    def check_id(self, task_id: int) -> None:
        """Raise TaskNotFoundError unless `task_id` is in a split."""
        if not any(task_id in ids for ids in self.splits.values()):
            raise TaskNotFoundError(
                f"alfworld has no task {task_id}: train ids are [0, 2420), test ids are [2420, 2620)"
            )

    def path(self, task_id: int, engine: Any = None) -> Path:
        """The game file of `task_id`, generated (and cached) on first use."""
        self.check_id(task_id)
        target = self.folder / f"{task_id:05d}" / GAME_FILE
        if not target.exists():
            game = generate_game(task_id, seed=self.seed, difficulty=self.difficulty, engine=engine)
            traj = json.dumps(game.traj_data(self.seed), sort_keys=True, indent=1).encode()
            _write_atomic(target.with_name(TRAJ_FILE), traj)
            _write_atomic(target, game.data)  # last: its presence marks a complete entry
        return target

    def traj_data(self, task_id: int, engine: Any = None) -> dict[str, Any]:
        """The `traj_data.json` of `task_id` (task type, targets, provenance)."""
        return json.loads(self.path(task_id, engine).with_name(TRAJ_FILE).read_text())

    def scene(self, task_id: int, engine: Any = None) -> Scene:
        """The scene of `task_id`'s game (generated and cached on first use)."""
        return game_scene(task_id, self.traj_data(task_id, engine), self.difficulty)


def split_of(task_id: int) -> str:
    """'train' or 'test' for a default-set id."""
    return "train" if task_id in TRAIN_IDS else "test"


def official_relpath(task_id: int, traj: dict[str, Any], seed: int) -> str:
    """Where a generated game goes in the official layout, e.g.
    `train/pick_and_place_simple-Apple-None-Fridge-2420/trial_00017/game.tw-pddl`."""
    p = traj["pddl_params"]
    target = p["parent_target"] or p["toggle_target"]
    folder = "train" if split_of(task_id) == "train" else TEST_FOLDER
    return f"{folder}/{traj['task_type']}-{p['object_target']}-None-{target}-{seed}/trial_{task_id:05d}/{GAME_FILE}"


_WORKER_ENGINE: Any = None  # one engine per worker process of build_default_set


def _materialise(args: tuple[int, int, Difficulty]) -> tuple[int, bytes, dict[str, Any]]:
    global _WORKER_ENGINE
    task_id, seed, difficulty = args
    if _WORKER_ENGINE is None:
        _WORKER_ENGINE = make_engine(admissible=False)
    games = GeneratedGames(seed, difficulty)
    path = games.path(task_id, _WORKER_ENGINE)
    return task_id, path.read_bytes(), json.loads(path.with_name(TRAJ_FILE).read_text())


def build_default_set(
    out_dir: str | os.PathLike[str],
    ids: Iterable[int] | None = None,
    workers: int = 1,
    *,
    seed: int = DEFAULT_SEED,
    difficulty: Difficulty = DEFAULT_DIFFICULTY,
) -> Path:
    """Write the set (all 2620 ids, or `ids`) as `out_dir/json_2.1.1/{train,valid_train}/.../game.tw-pddl`
    plus `out_dir/manifest.json` (sha256 per game); returns the manifest path. Uses the cache."""
    difficulty.validate()
    ids = sorted(set(TRAIN_IDS) | set(TEST_IDS)) if ids is None else sorted(set(ids))
    games = GeneratedGames(seed, difficulty)
    for task_id in ids:
        games.check_id(task_id)
    jobs = [(task_id, seed, difficulty) for task_id in ids]
    if workers > 1:
        with ProcessPoolExecutor(max_workers=workers) as pool:
            results = list(pool.map(_materialise, jobs, chunksize=8))
    else:
        results = [_materialise(job) for job in jobs]
    root = Path(out_dir) / "json_2.1.1"
    entries = []
    for task_id, data, traj in results:
        rel = official_relpath(task_id, traj, seed)
        _write_atomic(root / rel, data)
        _write_atomic((root / rel).with_name(TRAJ_FILE), json.dumps(traj, sort_keys=True, indent=1).encode())
        entries.append({"task_id": task_id, "split": split_of(task_id), "path": f"json_2.1.1/{rel}",
                        "task_type": traj["task_type"], "sha256": sha256(data)})
    manifest = {
        "generator_version": GENERATOR_VERSION, "seed": seed, "difficulty": asdict(difficulty),
        "engine": {name: metadata.version(name) for name in ("alfworld", "textworld")}, "games": entries,
    }
    out = Path(out_dir) / "manifest.json"
    _write_atomic(out, json.dumps(manifest, indent=1, sort_keys=True).encode())
    return out


class OfficialGames:
    """ALFWorld's own data (`json_2.1.1`): ids over sorted game paths, like AgentGym.

    train [0, 2420) are the first 2420 sorted `train/**/game.tw-pddl`; test [2420, 2620) the first
    200 of `valid_train/`; then `valid_seen` and `valid_unseen` follow as named splits. Paths with
    "movable" or "Sliced" are skipped, as ALFWorld's own loader does (the text engine cannot play them).
    """

    def __init__(self, data_dir: str | os.PathLike[str]) -> None:
        self.root = official_root(Path(data_dir))
        if self.root is None:
            raise ValueError(
                f"{data_dir} holds no ALFWorld data: expected {data_dir}/json_2.1.1/train/**/game.tw-pddl "
                "(or train/ directly); download it with `alfworld-download` or unset ALFWORLD_DATA"
            )
        self._paths: dict[int, Path] = {}
        self.splits: dict[str, Sequence[int]] = {}
        folders = [("train", "train", TRAIN_IDS), ("test", TEST_FOLDER, TEST_IDS)]
        start = TEST_IDS.stop
        for name in EXTRA_FOLDERS:
            count = len(_game_paths(self.root / name))
            folders.append((name, name, range(start, start + count)))
            start += count
        for split, folder, ids in folders:
            paths = _game_paths(self.root / folder)[: len(ids)]
            self.splits[split] = range(ids.start, ids.start + len(paths))
            self._paths.update(zip(self.splits[split], paths))

    def check_id(self, task_id: int) -> None:
        """Raise TaskNotFoundError unless `task_id` numbers a game of the data."""
        if task_id not in self._paths:
            spans = ", ".join(f"{k} [{r.start}, {r.stop})" for k, r in self.splits.items())
            raise TaskNotFoundError(f"alfworld (data {self.root}) has no task {task_id}; ids: {spans}")

    def path(self, task_id: int, engine: Any = None) -> Path:
        """The official game file of `task_id`."""
        self.check_id(task_id)
        return self._paths[task_id]


def official_root(path: Path) -> Path | None:
    """`path/json_2.1.1` or `path` itself when it holds a `train/` folder of games; else None."""
    for root in (path / "json_2.1.1", path):
        if (root / "train").is_dir():
            return root
    return None


def _game_paths(folder: Path) -> list[Path]:
    if not folder.is_dir():
        return []
    found = sorted(str(p.relative_to(folder)) for p in folder.rglob(GAME_FILE))
    return [folder / rel for rel in found if "movable" not in rel and "Sliced" not in rel]

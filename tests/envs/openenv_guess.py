"""A small OpenEnv environment for the tests, written in OpenEnv's own format: guess the number.

The server picks a number in [1, 10] from the reset seed; each action is a message in which the first
integer is the guess; the observation says higher / lower; a right guess scores 1 and ends the episode,
three wrong ones end it with 0.  ``serve()`` runs it with uvicorn on 127.0.0.1 on a free port.
"""

from __future__ import annotations

import random
import re
import socket
import threading
import time
from typing import Any, Optional

from openenv.core.env_server import create_app
from openenv.core.env_server.interfaces import Environment
from openenv.core.env_server.types import Action, Observation, State

MAX_GUESSES = 3


class GuessAction(Action):
    message: str


class GuessObservation(Observation):
    message: str = ""


def secret_of(seed: int | None) -> int:
    return random.Random(seed).randint(1, 10)


class GuessEnvironment(Environment[GuessAction, GuessObservation, State]):
    SUPPORTS_CONCURRENT_SESSIONS = True

    def __init__(self) -> None:
        super().__init__()
        self._state = State(episode_id=None, step_count=0)
        self.secret = 0

    def reset(self, seed: Optional[int] = None, episode_id: Optional[str] = None, **kwargs: Any) -> GuessObservation:
        self._state = State(episode_id=episode_id, step_count=0)
        self.secret = secret_of(seed)
        return GuessObservation(message="I picked a number from 1 to 10. Guess it.", done=False, reward=None)

    def step(self, action: GuessAction, timeout_s: Optional[float] = None, **kwargs: Any) -> GuessObservation:
        self._state.step_count += 1
        found = re.search(r"-?\d+", action.message)
        guess = int(found.group()) if found else None
        if guess == self.secret:
            return GuessObservation(message="Right!", done=True, reward=1.0)
        if self._state.step_count >= MAX_GUESSES:
            return GuessObservation(message="Out of guesses.", done=True, reward=0.0)
        hint = "Say a number." if guess is None else ("Higher." if guess < self.secret else "Lower.")
        return GuessObservation(message=hint, done=False, reward=0.0)

    @property
    def state(self) -> State:
        return self._state


def app():
    return create_app(GuessEnvironment, GuessAction, GuessObservation, env_name="guess", max_concurrent_envs=16)


def serve():
    """(base_url, server): the app served on a free local port until ``server.should_exit = True``."""
    import uvicorn

    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        port = s.getsockname()[1]
    server = uvicorn.Server(uvicorn.Config(app(), host="127.0.0.1", port=port, log_level="critical"))
    thread = threading.Thread(target=server.run, daemon=True)
    thread.start()
    deadline = time.time() + 30
    while not server.started:
        if time.time() > deadline or not thread.is_alive():
            raise RuntimeError("the OpenEnv test server did not start")
        time.sleep(0.05)
    return f"http://127.0.0.1:{port}", server

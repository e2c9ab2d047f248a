"""An independent in-suite model of lineage: what every effective transcript must be."""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any


@dataclass
class ModelTurn:
    turn_id: str
    role: str
    status: str = "running"
    records: list[dict[str, Any]] = field(default_factory=list)


@dataclass
class ModelSession:
    session_id: str
    inherited: list[ModelTurn]  # the effective turns frozen at the fork (shared objects)
    own: list[ModelTurn] = field(default_factory=list)
    parent: str | None = None
    root: str | None = None
    depth: int = 0
    owner: str = "alice"
    readers: set[str] = field(default_factory=set)  # principals granted a role on this session
    deleted: bool = False
    reverted: list[ModelTurn] = field(default_factory=list)  # own turns a revert took out

    @property
    def effective_turns(self) -> list[ModelTurn]:
        return self.inherited + self.own

    @property
    def running(self) -> ModelTurn | None:
        return next((turn for turn in self.own if turn.status == "running"), None)


class LineageModel:
    """Sessions, turns and forks as plain lists; a fork freezes a prefix of turn objects.

    Inherited turns are the very objects of the ancestor, and only finished turns are ever
    inherited, so a frozen prefix cannot change afterwards.
    """

    def __init__(self) -> None:
        self.sessions: dict[str, ModelSession] = {}

    def create(self, session_id: str, owner: str = "alice") -> ModelSession:
        session = ModelSession(session_id, [], root=session_id, owner=owner)
        self.sessions[session_id] = session
        return session

    def start_turn(self, session_id: str, turn_id: str, role: str) -> ModelTurn:
        turn = ModelTurn(turn_id, role)
        self.sessions[session_id].own.append(turn)
        return turn

    def append(self, session_id: str, turn_id: str, records: list[dict[str, Any]]) -> None:
        self.turn(session_id, turn_id).records.extend(records)

    def finish(self, session_id: str, turn_id: str, status: str) -> None:
        self.turn(session_id, turn_id).status = status

    def turn(self, session_id: str, turn_id: str) -> ModelTurn:
        return next(t for t in self.sessions[session_id].own if t.turn_id == turn_id)

    def revert(self, session_id: str, turn_id: str) -> list[ModelTurn]:
        """Undo the session to just before its own turn `turn_id`; the turns taken out. Forks keep
        the turn objects they froze, so they do not change."""
        session = self.sessions[session_id]
        position = [turn.turn_id for turn in session.own].index(turn_id)
        taken, session.own = session.own[position:], session.own[:position]
        session.reverted.extend(taken)
        return taken

    def cut_prefix(self, source_id: str, cut: dict[str, Any]) -> list[ModelTurn] | str:
        """The inherited turns for a cut, or the problem kind the server must answer."""
        turns = self.sessions[source_id].effective_turns
        if cut["mode"] == "latest":
            finished = [turn for turn in turns if turn.status != "running"]
            return finished
        ids = [turn.turn_id for turn in turns]
        if cut["turn_id"] not in ids:
            return "unknown-turn"
        position = ids.index(cut["turn_id"])
        if cut["mode"] == "through":
            if turns[position].status == "running":
                return "turn-incomplete"
            return turns[: position + 1]
        return turns[:position]

    def fork(self, source_id: str, child_id: str, inherited: list[ModelTurn], owner: str = "alice") -> ModelSession:
        source = self.sessions[source_id]
        child = ModelSession(
            child_id,
            list(inherited),
            parent=source_id,
            root=source.root,
            depth=source.depth + 1,
            owner=owner,
        )
        self.sessions[child_id] = child
        return child

    def transcript(self, session_id: str) -> list[dict[str, Any]]:
        return [record for turn in self.sessions[session_id].effective_turns for record in turn.records]

    # ---------------------------------------------------------------- authorization
    def ancestors(self, session_id: str) -> list[ModelSession]:
        found = []
        parent = self.sessions[session_id].parent
        while parent is not None:
            found.append(self.sessions[parent])
            parent = self.sessions[parent].parent
        return found

    @staticmethod
    def has_role(principal: str, session: ModelSession) -> bool:
        return session.owner == principal or principal in session.readers

    def read_status(self, session_id: str, principal: str) -> int:
        """A read through the lineage: 404 without a role or once deleted, 403 without every ancestor."""
        session = self.sessions[session_id]
        if session.deleted or not self.has_role(principal, session):
            return 404
        if not all(self.has_role(principal, ancestor) for ancestor in self.ancestors(session_id)):
            return 403
        return 200

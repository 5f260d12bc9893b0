"""The one way a pydantic record of ours is copied with changes: validated again, as a new one
is (pydantic's `model_copy(update=...)` skips validation, so a copy could hold what the model
refuses)."""

from __future__ import annotations

from typing import Any, Self

from pydantic import BaseModel


class Validated(BaseModel):
    """A pydantic model whose copies with changes are validated (`with_changes`)."""

    def with_changes(self, **changes: Any) -> Self:
        """A copy with `changes`, validated; the fields set stay set, and the changed are set."""
        data = self.model_dump(exclude_unset=True)
        data.update(changes)
        return self.model_validate(data)

"""The shipped JSON Schemas checked with validators built once: ``jsonschema.validate`` checks the schema itself and
builds a new validator at every call (270 ms a call for results.schema.json on the 2-core AMD VM, against 4 ms with
a validator built once), which a property test over 60 records paid 60 times."""

from __future__ import annotations

from functools import cache
from typing import Any

import jsonschema

from hwregress.store import schemas


@cache
def _validator(name: str) -> Any:
    schema = schemas.schema(name)
    kind = jsonschema.validators.validator_for(schema)
    kind.check_schema(schema)
    return kind(schema)


def validate(data: Any, name: str) -> None:
    """Check ``data`` against the shipped schema ``name`` (``"results"``, ``"baselines"``, ...).

    Raises:
        jsonschema.ValidationError: the most relevant mismatch (``jsonschema.exceptions.best_match``).
    """
    error = jsonschema.exceptions.best_match(_validator(name).iter_errors(data))
    if error is not None:
        raise error

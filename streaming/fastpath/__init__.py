"""Optimisations proven equal to the plain path: column passes that skip work the rules would do event
by event, and an evaluation of the entities changed or due alone (changed_entities)."""

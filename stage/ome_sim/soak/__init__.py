"""Not product code: ``ome-sim soak`` (make soak), a chaos soak of the manager on the embedded
cluster. A seeded plan of faults runs against a churning load of opted-in services while an
invariant checker, hooked into the API server itself, judges every request and every change
as the server sees it; then the faults stop and everything must converge.

- ``plan``: the seeded fault and load schedule (pure: a seed replays the same sequence);
- ``checker``: the invariants, from the server's own record;
- ``run``: the stage (server, provider, managers), the faults carried out, the end checks
  and the report;
- ``sabotage``: the manager with one protection turned off, to show each checker can fail.
"""

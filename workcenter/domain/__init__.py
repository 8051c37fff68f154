"""The store's pure rules and shapes: nothing in it reads or writes the database.

Workflow definitions (`workflows`), planning snapshots and triage plans (`planning`), the
normal form of stored values (`normalize`), instruction text (`instructions`), what a caller sends
to the work-item services, cleaned (`work_item_input`), and the rules the services apply to the
rows they read (`rules`). It imports only the standard library, Django
utilities that touch no database, and `workcenter.choices`, `constants`, `errors` and `clock`;
the models' fields, the services and the reads all build on it.
"""

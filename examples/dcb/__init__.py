"""Dynamic consistency boundaries: the DCB specification's examples (dcb.events).

``courses``: course subscriptions (a course's capacity and a student's course limit);
``usernames``: unique usernames (claim, release, re-claim); ``invoices``: consecutive
invoice numbers (gapless, unique). Each module is pure (events, decision models,
handlers); the tests run them in memory (GWT) and on SQLite and PostgreSQL.
"""

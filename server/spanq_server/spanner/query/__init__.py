"""The Spanner front-end's query engine, as the emulator's ``backend/query``: it reads a
statement and runs it on the domain, knowing nothing of gRPC services.

- ``lexing``: the one lexer (tokens of each dialect), literals, names and the limits statements are read within;
- ``ast``: the one syntax tree of both surfaces and both dialects;
- ``parser``: the one parser, ``parse(text, dialect)``: the queue statements (CREATE QUEUE, RECEIVE_, ...;
  GoogleSQL and PostgreSQL) and the table subset (table DDL, DML, SELECT over tables and queues);
- ``dialects``: what differs between the dialects and the surfaces (words, queue column types, messages);
- ``postgres``: the PostgreSQL generator of the table subset (psycopg.sql);
- ``schema``: a table's definition as registered; ``ranges``: the ranges values are checked against;
- ``values``: Spanner's value encoding, both ways (queue columns and table columns);
- ``executor``: runs parsed statements on the domain; ``tables``: Spanner tables' statements,
  mutations, reads and DDL through the store's port (``..port``);
- ``scope``: a database's namespace and dialect; ``names``: names as the DDL declared them.
"""

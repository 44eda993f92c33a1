"""Local (edge) Profile adapter: apsw/SQLite storage behind the canonical contract.

Dependency direction: contract <- local <- cli. The service never imports this package (it
sees storage only through the contract's ports), nor does cluster_postgres; the CLI's
composition roots hand it a store. This package owns the apsw connection, single-writer
transactions, the migrations runner, the injected clock and the repositories. It holds no policy
about when to dispatch and never controls a process.
"""

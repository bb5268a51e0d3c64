"""The ``magnetar`` command line and the admin REST client behind ``magnetar admin``.

:mod:`.main` builds the parser and runs a subcommand; each subcommand lives in its own ``cmd_*`` module,
imported only when the command line chooses it (:mod:`.subcommands`), and each ``cmd_*`` module imports what
its command runs on (the processes in :mod:`magnetar.admin.processes`, the tools in
:mod:`magnetar.admin.perf`) only in its ``run``. :mod:`.admin_client` is the REST client and verbs of
``magnetar admin``; :mod:`.tokens_tool` the work of ``magnetar tokens``. ``python -m magnetar.admin.cli`` runs
the program (:mod:`.__main__`).

Nothing here may be imported by :mod:`magnetar.admin.processes` or :mod:`magnetar.admin.perf`: this package is
the front door, not a library.
"""

"""``python -m fems2py`` is the ``fems2py`` command."""

from fems2py.cli import main

raise SystemExit(main())

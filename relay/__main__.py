from relay.cli.commands import main

raise SystemExit(main())

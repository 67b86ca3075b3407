from desk.cli import main

raise SystemExit(main())

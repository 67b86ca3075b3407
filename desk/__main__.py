from signoff.desk.cli import main

raise SystemExit(main())

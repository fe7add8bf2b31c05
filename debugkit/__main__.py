import sys

from debugkit.cli.main import main

sys.exit(main())

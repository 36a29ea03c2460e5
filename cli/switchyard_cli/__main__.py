import sys

from switchyard_cli.main import main

sys.exit(main())

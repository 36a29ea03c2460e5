import sys

from switchyard_local.cli import main

sys.exit(main())

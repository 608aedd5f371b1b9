import sys

from gregor.cli import main

sys.exit(main())

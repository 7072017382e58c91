import sys

from qnnrt.cli.main import main

sys.exit(main())

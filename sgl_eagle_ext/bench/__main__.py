import sys

from sgl_eagle_ext.bench.cli import main

sys.exit(main())

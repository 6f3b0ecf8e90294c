from turbotts.cli import main

main()

from cronwheel.cli.main import main

main()

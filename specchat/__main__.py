from specchat.app.cli import main

main()

"""The Spark a run uses: session and conf, object stores, warm engine, small steps, failures."""

"""Delta tables through Spark: catalog names, silver's shape and table, VACUUM carried out."""

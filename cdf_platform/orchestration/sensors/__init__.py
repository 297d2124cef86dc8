"""Sensors: incremental, rebuild, alerts; consumer assets' checks, repair jobs and sensor."""

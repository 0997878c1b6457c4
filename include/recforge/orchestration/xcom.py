"""XCom keys recforge tasks push besides their (small) return value."""

ERROR_KEY = "recforge_error"  # the failure's message, for the alert (dags test has no exc)
QUALITY_RESULT_KEY = "quality"  # the checklist's result when the gate fails, for the alert

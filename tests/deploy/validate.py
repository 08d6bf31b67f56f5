"""Check a request against the AWS service model botocore ships (the one
the AWS CLI sends with): python3 validate.py SERVICE OPERATION FILE.json.
Prints what the model refuses (unknown members, wrong types, values out
of an enum or a length range) and exits 1; exits 0 when it takes it."""
import json
import sys

import botocore.session
from botocore.validate import ParamValidator


def main():
    service, operation, path = sys.argv[1:4]
    with open(path) as f:
        params = json.load(f)
    model = botocore.session.get_session().get_service_model(service)
    report = ParamValidator().validate(params, model.operation_model(operation).input_shape)
    if report.has_errors():
        print(report.generate_report())
        sys.exit(1)


main()

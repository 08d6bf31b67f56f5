"""Translate template.yaml with aws-sam-translator (what CloudFormation's
AWS::Serverless transform runs) and print the CloudFormation JSON."""
import json
import sys

from samtranslator.model.exceptions import InvalidDocumentException
from samtranslator.translator.arn_generator import ArnGenerator
from samtranslator.translator.transform import transform
from samtranslator.yaml_helper import yaml_parse


class NoManagedPolicies:
    def load(self):
        return {}


import os
os.environ.setdefault("AWS_DEFAULT_REGION", "us-east-1")
ArnGenerator.BOTO_SESSION_REGION_NAME = "us-east-1"
with open(sys.argv[1]) as f:
    doc = yaml_parse(f.read())
# What `sam build` + `sam deploy` do to CodeUri: an uploaded artifact.
for res in doc.get("Resources", {}).values():
    if res.get("Type") == "AWS::Serverless::Function":
        res["Properties"]["CodeUri"] = "s3://artifacts/bootstrap.zip"
try:
    out = transform(doc, {}, NoManagedPolicies())
except InvalidDocumentException as e:
    print("\n".join(str(c) for c in e.causes), file=sys.stderr)
    sys.exit(1)
json.dump(out, sys.stdout, default=str)

"""The platform's AWS clients send a call without botocore's check of its
parameters (``switchyard.aws``): the service checks them. Here, in the integration
tier, every call is checked against the service's model before it is sent, so a
call the platform makes with a parameter the model does not allow fails its test
rather than reaching the emulator, which may take what AWS refuses."""

from __future__ import annotations

import pytest
from botocore.exceptions import ParamValidationError


def test_a_call_whose_parameters_the_model_does_not_allow_is_refused_before_it_is_sent(
    clients, provisioned
):
    ddb = clients("dynamodb")
    table = provisioned.names.results_table
    # A number where the model wants a string (DynamoDB's numbers travel as text).
    with pytest.raises(ParamValidationError, match=r"Key\.tenant\.S"):
        ddb.get_item(TableName=table, Key={"tenant": {"S": 7}, "request_id": {"S": "r1"}})
    with pytest.raises(ParamValidationError, match="MaxNumberOfMessages"):
        clients("sqs").receive_message(
            QueueUrl=provisioned.queues["digits-cnn"]["realtime"], MaxNumberOfMessages="10"
        )
    # A call the model allows goes through.
    key = {"tenant": {"S": "acme"}, "request_id": {"S": "r1"}}
    assert "Item" not in ddb.get_item(TableName=table, Key=key)

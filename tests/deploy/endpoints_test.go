package deploy

import (
	"context"
	"testing"

	"github.com/aws/aws-sdk-go-v2/aws"
	"github.com/aws/aws-sdk-go-v2/service/cloudwatch"
	cip "github.com/aws/aws-sdk-go-v2/service/cognitoidentityprovider"
	"github.com/aws/aws-sdk-go-v2/service/eventbridge"
	"github.com/aws/aws-sdk-go-v2/service/kms"
	"github.com/aws/aws-sdk-go-v2/service/secretsmanager"
	"github.com/aws/aws-sdk-go-v2/service/sesv2"
	"github.com/aws/aws-sdk-go-v2/service/sns"
	"github.com/aws/aws-sdk-go-v2/service/ssm"

	"github.com/otpguard/otpguard/internal/awsjson"
)

// TestEndpointsFollowTheSDKsResolvers: the product's lean AWS calls find
// the endpoint the SDK's own resolver finds, in every partition (China,
// GovCloud, the ISO partitions), for every service they call.
func TestEndpointsFollowTheSDKsResolvers(t *testing.T) {
	ctx := context.Background()
	services := map[string]func(region string) (string, error){
		"secretsmanager": func(r string) (string, error) {
			e, err := secretsmanager.NewDefaultEndpointResolverV2().ResolveEndpoint(ctx, secretsmanager.EndpointParameters{Region: aws.String(r)})
			return e.URI.String(), err
		},
		"ssm": func(r string) (string, error) {
			e, err := ssm.NewDefaultEndpointResolverV2().ResolveEndpoint(ctx, ssm.EndpointParameters{Region: aws.String(r)})
			return e.URI.String(), err
		},
		"email": func(r string) (string, error) {
			e, err := sesv2.NewDefaultEndpointResolverV2().ResolveEndpoint(ctx, sesv2.EndpointParameters{Region: aws.String(r)})
			return e.URI.String(), err
		},
		"sns": func(r string) (string, error) {
			e, err := sns.NewDefaultEndpointResolverV2().ResolveEndpoint(ctx, sns.EndpointParameters{Region: aws.String(r)})
			return e.URI.String(), err
		},
		"kms": func(r string) (string, error) {
			e, err := kms.NewDefaultEndpointResolverV2().ResolveEndpoint(ctx, kms.EndpointParameters{Region: aws.String(r)})
			return e.URI.String(), err
		},
		"cognito-idp": func(r string) (string, error) {
			e, err := cip.NewDefaultEndpointResolverV2().ResolveEndpoint(ctx, cip.EndpointParameters{Region: aws.String(r)})
			return e.URI.String(), err
		},
		"monitoring": func(r string) (string, error) { // the console's
			e, err := cloudwatch.NewDefaultEndpointResolverV2().ResolveEndpoint(ctx, cloudwatch.EndpointParameters{Region: aws.String(r)})
			return e.URI.String(), err
		},
		"events": func(r string) (string, error) {
			e, err := eventbridge.NewDefaultEndpointResolverV2().ResolveEndpoint(ctx, eventbridge.EndpointParameters{Region: aws.String(r)})
			return e.URI.String(), err
		},
	}
	regions := []string{"us-east-1", "eu-west-1", "ap-southeast-4", "il-central-1", "mx-central-1", "cn-north-1", "cn-northwest-1",
		"us-gov-west-1", "us-iso-east-1", "us-isob-east-1", "us-isof-south-1", "eu-isoe-west-1", "eusc-de-east-1"}
	for prefix, resolve := range services {
		for _, r := range regions {
			want, err := resolve(r)
			if err != nil {
				t.Errorf("%s in %s: the SDK has no endpoint: %v", prefix, r, err)
				continue
			}
			if got := awsjson.Endpoint(aws.Config{Region: r}, prefix); got != want {
				t.Errorf("%s in %s: %s, the SDK says %s", prefix, r, got, want)
			}
		}
	}
}

//! Package `Ydb.RateLimiter.V1`: the `RateLimiterService` gRPC service, as `tonic-build`
//! generates it with the `tonic-prost` codec (the way `ydb-grpc` generates YDB's other
//! services), with documentation added.
//!
//! # Examples
//!
//! ```no_run
//! # async fn run() -> Result<(), Box<dyn std::error::Error>> {
//! use ydb_coordination_proto::rate_limiter::ListResourcesRequest;
//! use ydb_coordination_proto::rate_limiter::v1::rate_limiter_service_client::RateLimiterServiceClient;
//!
//! let mut client = RateLimiterServiceClient::connect("http://127.0.0.1:2136").await?;
//! let request = ListResourcesRequest {
//!     coordination_node_path: "/local/quotas".to_string(),
//!     recursive: true,
//!     ..ListResourcesRequest::default()
//! };
//! let operation = client.list_resources(request).await?.into_inner().operation;
//! # let _ = operation;
//! # Ok(())
//! # }
//! ```

/// The client: [`RateLimiterServiceClient`](rate_limiter_service_client::RateLimiterServiceClient).
pub mod rate_limiter_service_client {
    #![allow(
        unused_variables,
        dead_code,
        clippy::wildcard_imports,
        clippy::let_unit_value
    )]
    use tonic::codegen::http::Uri;
    use tonic::codegen::*;
    /// The rate limiter's service, for the resources of a coordination node.
    #[derive(Debug, Clone)]
    pub struct RateLimiterServiceClient<T> {
        inner: tonic::client::Grpc<T>,
    }
    impl RateLimiterServiceClient<tonic::transport::Channel> {
        /// Attempt to create a new client by connecting to a given endpoint.
        pub async fn connect<D>(dst: D) -> Result<Self, tonic::transport::Error>
        where
            D: TryInto<tonic::transport::Endpoint>,
            D::Error: Into<StdError>,
        {
            let conn = tonic::transport::Endpoint::new(dst)?.connect().await?;
            Ok(Self::new(conn))
        }
    }
    impl<T> RateLimiterServiceClient<T>
    where
        T: tonic::client::GrpcService<tonic::body::Body>,
        T::Error: Into<StdError>,
        T::ResponseBody: Body<Data = Bytes> + std::marker::Send + 'static,
        <T::ResponseBody as Body>::Error: Into<StdError> + std::marker::Send,
    {
        /// A client over a gRPC transport (e.g. a `tonic::transport::Channel`).
        pub fn new(inner: T) -> Self {
            let inner = tonic::client::Grpc::new(inner);
            Self { inner }
        }
        /// A client that sends its requests to `origin` (scheme and authority) over `inner`.
        pub fn with_origin(inner: T, origin: Uri) -> Self {
            let inner = tonic::client::Grpc::with_origin(inner, origin);
            Self { inner }
        }
        /// A client whose every request passes through `interceptor` first (to add
        /// headers such as `x-ydb-database` and `x-ydb-auth-ticket`).
        pub fn with_interceptor<F>(
            inner: T,
            interceptor: F,
        ) -> RateLimiterServiceClient<InterceptedService<T, F>>
        where
            F: tonic::service::Interceptor,
            T::ResponseBody: Default,
            T: tonic::codegen::Service<
                    http::Request<tonic::body::Body>,
                    Response = http::Response<
                        <T as tonic::client::GrpcService<tonic::body::Body>>::ResponseBody,
                    >,
                >,
            <T as tonic::codegen::Service<http::Request<tonic::body::Body>>>::Error:
                Into<StdError> + std::marker::Send + std::marker::Sync,
        {
            RateLimiterServiceClient::new(InterceptedService::new(inner, interceptor))
        }
        /// Compress requests with the given encoding.
        ///
        /// This requires the server to support it otherwise it might respond with an
        /// error.
        #[must_use]
        pub fn send_compressed(mut self, encoding: CompressionEncoding) -> Self {
            self.inner = self.inner.send_compressed(encoding);
            self
        }
        /// Enable decompressing responses.
        #[must_use]
        pub fn accept_compressed(mut self, encoding: CompressionEncoding) -> Self {
            self.inner = self.inner.accept_compressed(encoding);
            self
        }
        /// Limits the maximum size of a decoded message.
        ///
        /// Default: `4MB`
        #[must_use]
        pub fn max_decoding_message_size(mut self, limit: usize) -> Self {
            self.inner = self.inner.max_decoding_message_size(limit);
            self
        }
        /// Limits the maximum size of an encoded message.
        ///
        /// Default: `usize::MAX`
        #[must_use]
        pub fn max_encoding_message_size(mut self, limit: usize) -> Self {
            self.inner = self.inner.max_encoding_message_size(limit);
            self
        }
        /// Creates a resource; its parent must exist.
        pub async fn create_resource(
            &mut self,
            request: impl tonic::IntoRequest<super::super::CreateResourceRequest>,
        ) -> std::result::Result<tonic::Response<super::super::CreateResourceResponse>, tonic::Status>
        {
            self.inner.ready().await.map_err(|e| {
                tonic::Status::unknown(format!("Service was not ready: {}", e.into()))
            })?;
            let codec = tonic_prost::ProstCodec::default();
            let path = http::uri::PathAndQuery::from_static(
                "/Ydb.RateLimiter.V1.RateLimiterService/CreateResource",
            );
            let mut req = request.into_request();
            req.extensions_mut().insert(GrpcMethod::new(
                "Ydb.RateLimiter.V1.RateLimiterService",
                "CreateResource",
            ));
            self.inner.unary(req, path, codec).await
        }
        /// Replaces a resource's settings.
        pub async fn alter_resource(
            &mut self,
            request: impl tonic::IntoRequest<super::super::AlterResourceRequest>,
        ) -> std::result::Result<tonic::Response<super::super::AlterResourceResponse>, tonic::Status>
        {
            self.inner.ready().await.map_err(|e| {
                tonic::Status::unknown(format!("Service was not ready: {}", e.into()))
            })?;
            let codec = tonic_prost::ProstCodec::default();
            let path = http::uri::PathAndQuery::from_static(
                "/Ydb.RateLimiter.V1.RateLimiterService/AlterResource",
            );
            let mut req = request.into_request();
            req.extensions_mut().insert(GrpcMethod::new(
                "Ydb.RateLimiter.V1.RateLimiterService",
                "AlterResource",
            ));
            self.inner.unary(req, path, codec).await
        }
        /// Deletes a resource that has no children.
        pub async fn drop_resource(
            &mut self,
            request: impl tonic::IntoRequest<super::super::DropResourceRequest>,
        ) -> std::result::Result<tonic::Response<super::super::DropResourceResponse>, tonic::Status>
        {
            self.inner.ready().await.map_err(|e| {
                tonic::Status::unknown(format!("Service was not ready: {}", e.into()))
            })?;
            let codec = tonic_prost::ProstCodec::default();
            let path = http::uri::PathAndQuery::from_static(
                "/Ydb.RateLimiter.V1.RateLimiterService/DropResource",
            );
            let mut req = request.into_request();
            req.extensions_mut().insert(GrpcMethod::new(
                "Ydb.RateLimiter.V1.RateLimiterService",
                "DropResource",
            ));
            self.inner.unary(req, path, codec).await
        }
        /// Lists resource paths, of one subtree or of the roots.
        pub async fn list_resources(
            &mut self,
            request: impl tonic::IntoRequest<super::super::ListResourcesRequest>,
        ) -> std::result::Result<tonic::Response<super::super::ListResourcesResponse>, tonic::Status>
        {
            self.inner.ready().await.map_err(|e| {
                tonic::Status::unknown(format!("Service was not ready: {}", e.into()))
            })?;
            let codec = tonic_prost::ProstCodec::default();
            let path = http::uri::PathAndQuery::from_static(
                "/Ydb.RateLimiter.V1.RateLimiterService/ListResources",
            );
            let mut req = request.into_request();
            req.extensions_mut().insert(GrpcMethod::new(
                "Ydb.RateLimiter.V1.RateLimiterService",
                "ListResources",
            ));
            self.inner.unary(req, path, codec).await
        }
        /// Describes a resource: its stored settings.
        pub async fn describe_resource(
            &mut self,
            request: impl tonic::IntoRequest<super::super::DescribeResourceRequest>,
        ) -> std::result::Result<
            tonic::Response<super::super::DescribeResourceResponse>,
            tonic::Status,
        > {
            self.inner.ready().await.map_err(|e| {
                tonic::Status::unknown(format!("Service was not ready: {}", e.into()))
            })?;
            let codec = tonic_prost::ProstCodec::default();
            let path = http::uri::PathAndQuery::from_static(
                "/Ydb.RateLimiter.V1.RateLimiterService/DescribeResource",
            );
            let mut req = request.into_request();
            req.extensions_mut().insert(GrpcMethod::new(
                "Ydb.RateLimiter.V1.RateLimiterService",
                "DescribeResource",
            ));
            self.inner.unary(req, path, codec).await
        }
        /// Takes units from a resource (`required`) or reports units spent (`used`).
        pub async fn acquire_resource(
            &mut self,
            request: impl tonic::IntoRequest<super::super::AcquireResourceRequest>,
        ) -> std::result::Result<
            tonic::Response<super::super::AcquireResourceResponse>,
            tonic::Status,
        > {
            self.inner.ready().await.map_err(|e| {
                tonic::Status::unknown(format!("Service was not ready: {}", e.into()))
            })?;
            let codec = tonic_prost::ProstCodec::default();
            let path = http::uri::PathAndQuery::from_static(
                "/Ydb.RateLimiter.V1.RateLimiterService/AcquireResource",
            );
            let mut req = request.into_request();
            req.extensions_mut().insert(GrpcMethod::new(
                "Ydb.RateLimiter.V1.RateLimiterService",
                "AcquireResource",
            ));
            self.inner.unary(req, path, codec).await
        }
    }
}
/// The server: implement [`RateLimiterService`](rate_limiter_service_server::RateLimiterService)
/// and serve it as a [`RateLimiterServiceServer`](rate_limiter_service_server::RateLimiterServiceServer).
#[cfg(feature = "server")]
#[cfg_attr(docsrs, doc(cfg(feature = "server")))]
pub mod rate_limiter_service_server {
    #![allow(
        unused_variables,
        dead_code,
        clippy::wildcard_imports,
        clippy::let_unit_value
    )]
    use tonic::codegen::*;
    /// The service's calls, to be implemented for use with [`RateLimiterServiceServer`].
    #[async_trait]
    pub trait RateLimiterService: std::marker::Send + std::marker::Sync + 'static {
        /// Creates a resource; its parent must exist.
        async fn create_resource(
            &self,
            request: tonic::Request<super::super::CreateResourceRequest>,
        ) -> std::result::Result<tonic::Response<super::super::CreateResourceResponse>, tonic::Status>;
        /// Replaces a resource's settings.
        async fn alter_resource(
            &self,
            request: tonic::Request<super::super::AlterResourceRequest>,
        ) -> std::result::Result<tonic::Response<super::super::AlterResourceResponse>, tonic::Status>;
        /// Deletes a resource that has no children.
        async fn drop_resource(
            &self,
            request: tonic::Request<super::super::DropResourceRequest>,
        ) -> std::result::Result<tonic::Response<super::super::DropResourceResponse>, tonic::Status>;
        /// Lists resource paths, of one subtree or of the roots.
        async fn list_resources(
            &self,
            request: tonic::Request<super::super::ListResourcesRequest>,
        ) -> std::result::Result<tonic::Response<super::super::ListResourcesResponse>, tonic::Status>;
        /// Describes a resource: its stored settings.
        async fn describe_resource(
            &self,
            request: tonic::Request<super::super::DescribeResourceRequest>,
        ) -> std::result::Result<
            tonic::Response<super::super::DescribeResourceResponse>,
            tonic::Status,
        >;
        /// Takes units from a resource (`required`) or reports units spent (`used`).
        async fn acquire_resource(
            &self,
            request: tonic::Request<super::super::AcquireResourceRequest>,
        ) -> std::result::Result<
            tonic::Response<super::super::AcquireResourceResponse>,
            tonic::Status,
        >;
    }
    /// The rate limiter's service, for the resources of a coordination node.
    #[derive(Debug)]
    pub struct RateLimiterServiceServer<T> {
        inner: Arc<T>,
        accept_compression_encodings: EnabledCompressionEncodings,
        send_compression_encodings: EnabledCompressionEncodings,
        max_decoding_message_size: Option<usize>,
        max_encoding_message_size: Option<usize>,
    }
    impl<T> RateLimiterServiceServer<T> {
        /// Serves `inner`.
        pub fn new(inner: T) -> Self {
            Self::from_arc(Arc::new(inner))
        }
        /// Serves a shared `inner`.
        pub fn from_arc(inner: Arc<T>) -> Self {
            Self {
                inner,
                accept_compression_encodings: Default::default(),
                send_compression_encodings: Default::default(),
                max_decoding_message_size: None,
                max_encoding_message_size: None,
            }
        }
        /// Serves `inner`, passing every request through `interceptor` first.
        pub fn with_interceptor<F>(inner: T, interceptor: F) -> InterceptedService<Self, F>
        where
            F: tonic::service::Interceptor,
        {
            InterceptedService::new(Self::new(inner), interceptor)
        }
        /// Enable decompressing requests with the given encoding.
        #[must_use]
        pub fn accept_compressed(mut self, encoding: CompressionEncoding) -> Self {
            self.accept_compression_encodings.enable(encoding);
            self
        }
        /// Compress responses with the given encoding, if the client supports it.
        #[must_use]
        pub fn send_compressed(mut self, encoding: CompressionEncoding) -> Self {
            self.send_compression_encodings.enable(encoding);
            self
        }
        /// Limits the maximum size of a decoded message.
        ///
        /// Default: `4MB`
        #[must_use]
        pub fn max_decoding_message_size(mut self, limit: usize) -> Self {
            self.max_decoding_message_size = Some(limit);
            self
        }
        /// Limits the maximum size of an encoded message.
        ///
        /// Default: `usize::MAX`
        #[must_use]
        pub fn max_encoding_message_size(mut self, limit: usize) -> Self {
            self.max_encoding_message_size = Some(limit);
            self
        }
    }
    impl<T, B> tonic::codegen::Service<http::Request<B>> for RateLimiterServiceServer<T>
    where
        T: RateLimiterService,
        B: Body + std::marker::Send + 'static,
        B::Error: Into<StdError> + std::marker::Send + 'static,
    {
        type Response = http::Response<tonic::body::Body>;
        type Error = std::convert::Infallible;
        type Future = BoxFuture<Self::Response, Self::Error>;
        fn poll_ready(
            &mut self,
            _cx: &mut Context<'_>,
        ) -> Poll<std::result::Result<(), Self::Error>> {
            Poll::Ready(Ok(()))
        }
        fn call(&mut self, req: http::Request<B>) -> Self::Future {
            match req.uri().path() {
                "/Ydb.RateLimiter.V1.RateLimiterService/CreateResource" => {
                    #[allow(non_camel_case_types)]
                    struct CreateResourceSvc<T: RateLimiterService>(pub Arc<T>);
                    impl<T: RateLimiterService>
                        tonic::server::UnaryService<super::super::CreateResourceRequest>
                        for CreateResourceSvc<T>
                    {
                        type Response = super::super::CreateResourceResponse;
                        type Future = BoxFuture<tonic::Response<Self::Response>, tonic::Status>;
                        fn call(
                            &mut self,
                            request: tonic::Request<super::super::CreateResourceRequest>,
                        ) -> Self::Future {
                            let inner = Arc::clone(&self.0);
                            let fut = async move {
                                <T as RateLimiterService>::create_resource(&inner, request).await
                            };
                            Box::pin(fut)
                        }
                    }
                    let accept_compression_encodings = self.accept_compression_encodings;
                    let send_compression_encodings = self.send_compression_encodings;
                    let max_decoding_message_size = self.max_decoding_message_size;
                    let max_encoding_message_size = self.max_encoding_message_size;
                    let inner = self.inner.clone();
                    let fut = async move {
                        let method = CreateResourceSvc(inner);
                        let codec = tonic_prost::ProstCodec::default();
                        let mut grpc = tonic::server::Grpc::new(codec)
                            .apply_compression_config(
                                accept_compression_encodings,
                                send_compression_encodings,
                            )
                            .apply_max_message_size_config(
                                max_decoding_message_size,
                                max_encoding_message_size,
                            );
                        let res = grpc.unary(method, req).await;
                        Ok(res)
                    };
                    Box::pin(fut)
                }
                "/Ydb.RateLimiter.V1.RateLimiterService/AlterResource" => {
                    #[allow(non_camel_case_types)]
                    struct AlterResourceSvc<T: RateLimiterService>(pub Arc<T>);
                    impl<T: RateLimiterService>
                        tonic::server::UnaryService<super::super::AlterResourceRequest>
                        for AlterResourceSvc<T>
                    {
                        type Response = super::super::AlterResourceResponse;
                        type Future = BoxFuture<tonic::Response<Self::Response>, tonic::Status>;
                        fn call(
                            &mut self,
                            request: tonic::Request<super::super::AlterResourceRequest>,
                        ) -> Self::Future {
                            let inner = Arc::clone(&self.0);
                            let fut = async move {
                                <T as RateLimiterService>::alter_resource(&inner, request).await
                            };
                            Box::pin(fut)
                        }
                    }
                    let accept_compression_encodings = self.accept_compression_encodings;
                    let send_compression_encodings = self.send_compression_encodings;
                    let max_decoding_message_size = self.max_decoding_message_size;
                    let max_encoding_message_size = self.max_encoding_message_size;
                    let inner = self.inner.clone();
                    let fut = async move {
                        let method = AlterResourceSvc(inner);
                        let codec = tonic_prost::ProstCodec::default();
                        let mut grpc = tonic::server::Grpc::new(codec)
                            .apply_compression_config(
                                accept_compression_encodings,
                                send_compression_encodings,
                            )
                            .apply_max_message_size_config(
                                max_decoding_message_size,
                                max_encoding_message_size,
                            );
                        let res = grpc.unary(method, req).await;
                        Ok(res)
                    };
                    Box::pin(fut)
                }
                "/Ydb.RateLimiter.V1.RateLimiterService/DropResource" => {
                    #[allow(non_camel_case_types)]
                    struct DropResourceSvc<T: RateLimiterService>(pub Arc<T>);
                    impl<T: RateLimiterService>
                        tonic::server::UnaryService<super::super::DropResourceRequest>
                        for DropResourceSvc<T>
                    {
                        type Response = super::super::DropResourceResponse;
                        type Future = BoxFuture<tonic::Response<Self::Response>, tonic::Status>;
                        fn call(
                            &mut self,
                            request: tonic::Request<super::super::DropResourceRequest>,
                        ) -> Self::Future {
                            let inner = Arc::clone(&self.0);
                            let fut = async move {
                                <T as RateLimiterService>::drop_resource(&inner, request).await
                            };
                            Box::pin(fut)
                        }
                    }
                    let accept_compression_encodings = self.accept_compression_encodings;
                    let send_compression_encodings = self.send_compression_encodings;
                    let max_decoding_message_size = self.max_decoding_message_size;
                    let max_encoding_message_size = self.max_encoding_message_size;
                    let inner = self.inner.clone();
                    let fut = async move {
                        let method = DropResourceSvc(inner);
                        let codec = tonic_prost::ProstCodec::default();
                        let mut grpc = tonic::server::Grpc::new(codec)
                            .apply_compression_config(
                                accept_compression_encodings,
                                send_compression_encodings,
                            )
                            .apply_max_message_size_config(
                                max_decoding_message_size,
                                max_encoding_message_size,
                            );
                        let res = grpc.unary(method, req).await;
                        Ok(res)
                    };
                    Box::pin(fut)
                }
                "/Ydb.RateLimiter.V1.RateLimiterService/ListResources" => {
                    #[allow(non_camel_case_types)]
                    struct ListResourcesSvc<T: RateLimiterService>(pub Arc<T>);
                    impl<T: RateLimiterService>
                        tonic::server::UnaryService<super::super::ListResourcesRequest>
                        for ListResourcesSvc<T>
                    {
                        type Response = super::super::ListResourcesResponse;
                        type Future = BoxFuture<tonic::Response<Self::Response>, tonic::Status>;
                        fn call(
                            &mut self,
                            request: tonic::Request<super::super::ListResourcesRequest>,
                        ) -> Self::Future {
                            let inner = Arc::clone(&self.0);
                            let fut = async move {
                                <T as RateLimiterService>::list_resources(&inner, request).await
                            };
                            Box::pin(fut)
                        }
                    }
                    let accept_compression_encodings = self.accept_compression_encodings;
                    let send_compression_encodings = self.send_compression_encodings;
                    let max_decoding_message_size = self.max_decoding_message_size;
                    let max_encoding_message_size = self.max_encoding_message_size;
                    let inner = self.inner.clone();
                    let fut = async move {
                        let method = ListResourcesSvc(inner);
                        let codec = tonic_prost::ProstCodec::default();
                        let mut grpc = tonic::server::Grpc::new(codec)
                            .apply_compression_config(
                                accept_compression_encodings,
                                send_compression_encodings,
                            )
                            .apply_max_message_size_config(
                                max_decoding_message_size,
                                max_encoding_message_size,
                            );
                        let res = grpc.unary(method, req).await;
                        Ok(res)
                    };
                    Box::pin(fut)
                }
                "/Ydb.RateLimiter.V1.RateLimiterService/DescribeResource" => {
                    #[allow(non_camel_case_types)]
                    struct DescribeResourceSvc<T: RateLimiterService>(pub Arc<T>);
                    impl<T: RateLimiterService>
                        tonic::server::UnaryService<super::super::DescribeResourceRequest>
                        for DescribeResourceSvc<T>
                    {
                        type Response = super::super::DescribeResourceResponse;
                        type Future = BoxFuture<tonic::Response<Self::Response>, tonic::Status>;
                        fn call(
                            &mut self,
                            request: tonic::Request<super::super::DescribeResourceRequest>,
                        ) -> Self::Future {
                            let inner = Arc::clone(&self.0);
                            let fut = async move {
                                <T as RateLimiterService>::describe_resource(&inner, request).await
                            };
                            Box::pin(fut)
                        }
                    }
                    let accept_compression_encodings = self.accept_compression_encodings;
                    let send_compression_encodings = self.send_compression_encodings;
                    let max_decoding_message_size = self.max_decoding_message_size;
                    let max_encoding_message_size = self.max_encoding_message_size;
                    let inner = self.inner.clone();
                    let fut = async move {
                        let method = DescribeResourceSvc(inner);
                        let codec = tonic_prost::ProstCodec::default();
                        let mut grpc = tonic::server::Grpc::new(codec)
                            .apply_compression_config(
                                accept_compression_encodings,
                                send_compression_encodings,
                            )
                            .apply_max_message_size_config(
                                max_decoding_message_size,
                                max_encoding_message_size,
                            );
                        let res = grpc.unary(method, req).await;
                        Ok(res)
                    };
                    Box::pin(fut)
                }
                "/Ydb.RateLimiter.V1.RateLimiterService/AcquireResource" => {
                    #[allow(non_camel_case_types)]
                    struct AcquireResourceSvc<T: RateLimiterService>(pub Arc<T>);
                    impl<T: RateLimiterService>
                        tonic::server::UnaryService<super::super::AcquireResourceRequest>
                        for AcquireResourceSvc<T>
                    {
                        type Response = super::super::AcquireResourceResponse;
                        type Future = BoxFuture<tonic::Response<Self::Response>, tonic::Status>;
                        fn call(
                            &mut self,
                            request: tonic::Request<super::super::AcquireResourceRequest>,
                        ) -> Self::Future {
                            let inner = Arc::clone(&self.0);
                            let fut = async move {
                                <T as RateLimiterService>::acquire_resource(&inner, request).await
                            };
                            Box::pin(fut)
                        }
                    }
                    let accept_compression_encodings = self.accept_compression_encodings;
                    let send_compression_encodings = self.send_compression_encodings;
                    let max_decoding_message_size = self.max_decoding_message_size;
                    let max_encoding_message_size = self.max_encoding_message_size;
                    let inner = self.inner.clone();
                    let fut = async move {
                        let method = AcquireResourceSvc(inner);
                        let codec = tonic_prost::ProstCodec::default();
                        let mut grpc = tonic::server::Grpc::new(codec)
                            .apply_compression_config(
                                accept_compression_encodings,
                                send_compression_encodings,
                            )
                            .apply_max_message_size_config(
                                max_decoding_message_size,
                                max_encoding_message_size,
                            );
                        let res = grpc.unary(method, req).await;
                        Ok(res)
                    };
                    Box::pin(fut)
                }
                _ => Box::pin(async move {
                    let mut response = http::Response::new(tonic::body::Body::default());
                    let headers = response.headers_mut();
                    headers.insert(
                        tonic::Status::GRPC_STATUS,
                        (tonic::Code::Unimplemented as i32).into(),
                    );
                    headers.insert(
                        http::header::CONTENT_TYPE,
                        tonic::metadata::GRPC_CONTENT_TYPE,
                    );
                    Ok(response)
                }),
            }
        }
    }
    impl<T> Clone for RateLimiterServiceServer<T> {
        fn clone(&self) -> Self {
            let inner = self.inner.clone();
            Self {
                inner,
                accept_compression_encodings: self.accept_compression_encodings,
                send_compression_encodings: self.send_compression_encodings,
                max_decoding_message_size: self.max_decoding_message_size,
                max_encoding_message_size: self.max_encoding_message_size,
            }
        }
    }
    /// The gRPC service name.
    pub const SERVICE_NAME: &str = "Ydb.RateLimiter.V1.RateLimiterService";
    impl<T> tonic::server::NamedService for RateLimiterServiceServer<T> {
        const NAME: &'static str = SERVICE_NAME;
    }
}
